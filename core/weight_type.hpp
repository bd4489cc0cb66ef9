#pragma once
// The element types a weight matrix may be stored in, one row each. The file
// format validates through this table, the converter packs through it, the
// kernels are registered against it and the command line names types by it:
// adding a type is one row here plus its kernels (docs/architecture.md).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mmgpt {

// The ids are the .mmgpt file's dtype ids.
enum class WeightType : uint32_t { F32 = 0, BF16 = 1, F16 = 2, Q8_0 = 3, Q4_0 = 4 };
inline constexpr size_t kWeightTypeCount = 5;
// Another name for the type, for programs embedding mmgpt (mmgpt.hpp) that spell it DType.
using DType = WeightType;

// How a matrix of the type is packed for the matmul kernels. The values are
// the .mmgpt file's layout ids (docs/format.md); layout 0 is row-major.
enum class Packing : uint32_t {
  Panels = 1,       // panel16: panels of 16 rows, one k-step a row of 16 elements (panel_layout.hpp)
  BlockPanels = 2,  // panel16q: panels of quantized blocks with their scales (quant_layout.hpp)
  PanelPairs = 3,   // panel16x2: 16-bit panels in pairs whose lines alternate (panel_layout.hpp)
};

// What a matmul does to its activations before multiplying them by the weights.
enum class ActivationPrep {
  None,      // x stays f32 (a kernel may still round it, as the bf16 dot product does)
  Q8Blocks,  // x quantized per block of 32 to 8 bits with an f32 scale (quant_layout.hpp)
};

struct WeightTypeInfo {
  WeightType type;
  std::string_view name;  // as the command line and `inspect` spell it
  uint32_t block;         // elements along a row that share one scale (1: element-wise)
  uint32_t block_bytes;   // bytes a block takes in a packed matrix, its scale included
  uint32_t unit_blocks;   // blocks a panel stores together as one unit
  Packing packing;
  ActivationPrep prep;
  bool element_wise;    // stored element by element: may also hold a KV cache
  bool any_tensor;      // may hold any tensor, row-major too (else only packed matrices)
  float max_magnitude;  // largest |w| the type stores without its block scale overflowing
  // Packs row-major W[N, K] into `out` (packed_matrix_bytes(type, N, K)
  // bytes), the padding included.
  void (*pack)(const float* w, size_t N, size_t K, void* out);
  // Row n of a packed W[N, K] as f32, exactly the values the kernels weigh.
  void (*unpack_row)(const void* packed, size_t N, size_t K, size_t n, float* row);
};

// The row of a type (one of the enum's values).
const WeightTypeInfo& weight_type_info(WeightType t);
// The row with this file dtype id, or null.
const WeightTypeInfo* weight_type_by_id(uint32_t id);
// The row with this name, or null.
const WeightTypeInfo* weight_type_by_name(std::string_view name);
// "f32, bf16, f16, q8_0, q4_0": every name, in id order.
std::string weight_type_names();
// "0 = f32, 1 = bf16, ...": every id and name, in id order.
std::string weight_type_ids();

inline std::string_view weight_type_name(WeightType t) { return weight_type_info(t).name; }
inline bool is_quantized(WeightType t) { return weight_type_info(t).prep == ActivationPrep::Q8Blocks; }

// Bytes of a packed W[N, K] of type t (rows rounded up to whole panels, K to
// whole units), or false when the count overflows 64 bits.
bool packed_matrix_bytes(WeightType t, uint64_t N, uint64_t K, uint64_t& bytes);
// The same for shapes known to fit (an in-memory matrix).
size_t packed_weight_bytes(WeightType t, size_t N, size_t K);
// The rows a packed matrix can be cut at: packing rows [r, r + n) of W[N, K],
// r a multiple of this and n too (unless the piece ends W), gives bytes
// [packed_weight_bytes(t, r, K), ...) of W's packing. A panel (16 rows), or a
// pair of panels for the 16-bit types' paired layout.
size_t pack_row_unit(WeightType t);

// File layout ids and their names: 0 row-major, then the packings.
inline constexpr uint32_t kLayoutRowMajor = 0;
const char* layout_name(uint32_t layout_id);  // "row-major", "panel16", "panel16q", "panel16x2", or null

}  // namespace mmgpt
