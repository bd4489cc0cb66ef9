#include "core/weight_type.hpp"

#include <array>
#include <limits>

#include "core/panel_layout.hpp"
#include "core/quant_layout.hpp"

namespace mmgpt {
namespace {

constexpr float kUnbounded = std::numeric_limits<float>::infinity();
constexpr float kF16Max = 65504.0f;  // the largest finite scale a block can store

template <WeightType T>
void pack(const float* w, size_t N, size_t K, void* out) {
  if constexpr (T == WeightType::F32)
    pack_panels(w, N, K, static_cast<float*>(out));
  else if constexpr (T == WeightType::BF16 || T == WeightType::F16)
    pack_half_panels(w, N, K, T, static_cast<uint16_t*>(out));
  else
    quantize_panels(w, N, K, T, static_cast<uint8_t*>(out));
}

template <WeightType T>
void unpack_row(const void* packed, size_t N, size_t K, size_t n, float* row) {
  unpack_panel_row(packed, T, N, K, n, row);
}

template <WeightType T>
constexpr WeightTypeInfo row(std::string_view name, uint32_t block, uint32_t block_bytes, uint32_t unit_blocks,
                             Packing packing, ActivationPrep prep, float max_magnitude) {
  return {.type = T,
          .name = name,
          .block = block,
          .block_bytes = block_bytes,
          .unit_blocks = unit_blocks,
          .packing = packing,
          .prep = prep,
          .element_wise = block == 1,
          .any_tensor = T == WeightType::F32,
          .max_magnitude = max_magnitude,
          .pack = &pack<T>,
          .unpack_row = &unpack_row<T>};
}

// q8_0 / q4_0 blocks: 32 quants (1 byte or half a byte each) and an f16 scale,
// two blocks a unit (quant_layout.hpp).
const std::array<WeightTypeInfo, kWeightTypeCount> kTable = {
    row<WeightType::F32>("f32", 1, 4, 1, Packing::Panels, ActivationPrep::None, kUnbounded),
    row<WeightType::BF16>("bf16", 1, 2, 1, Packing::PanelPairs, ActivationPrep::None, kUnbounded),
    row<WeightType::F16>("f16", 1, 2, 1, Packing::PanelPairs, ActivationPrep::None, kUnbounded),
    row<WeightType::Q8_0>("q8_0", 32, 34, 2, Packing::BlockPanels, ActivationPrep::Q8Blocks, kF16Max * 127.0f),
    row<WeightType::Q4_0>("q4_0", 32, 18, 2, Packing::BlockPanels, ActivationPrep::Q8Blocks, kF16Max * 8.0f),
};

}  // namespace

const WeightTypeInfo& weight_type_info(WeightType t) { return kTable[static_cast<size_t>(t)]; }

const WeightTypeInfo* weight_type_by_id(uint32_t id) { return id < kTable.size() ? &kTable[id] : nullptr; }

const WeightTypeInfo* weight_type_by_name(std::string_view name) {
  for (const WeightTypeInfo& t : kTable)
    if (t.name == name) return &t;
  return nullptr;
}

std::string weight_type_names() {
  std::string s;
  for (const WeightTypeInfo& t : kTable) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

std::string weight_type_ids() {
  std::string s;
  for (const WeightTypeInfo& t : kTable)
    s += (s.empty() ? "" : ", ") + std::to_string(static_cast<uint32_t>(t.type)) + " = " + std::string(t.name);
  return s;
}

bool packed_matrix_bytes(WeightType t, uint64_t N, uint64_t K, uint64_t& bytes) {
  const WeightTypeInfo& w = weight_type_info(t);
  const uint64_t panels = N / kPanelWidth + (N % kPanelWidth != 0);
  const uint64_t blocks = K / w.block + (K % w.block != 0);
  const uint64_t units = blocks / w.unit_blocks + (blocks % w.unit_blocks != 0);
  return !__builtin_mul_overflow(panels, kPanelWidth * w.unit_blocks * w.block_bytes, &bytes) &&
         !__builtin_mul_overflow(bytes, units, &bytes);
}

size_t packed_weight_bytes(WeightType t, size_t N, size_t K) {
  uint64_t bytes = 0;
  packed_matrix_bytes(t, N, K, bytes);
  return bytes;
}

size_t pack_row_unit(WeightType t) {
  return weight_type_info(t).packing == Packing::PanelPairs ? 2 * kPanelWidth : kPanelWidth;
}

const char* layout_name(uint32_t layout_id) {
  switch (layout_id) {
    case kLayoutRowMajor: return "row-major";
    case static_cast<uint32_t>(Packing::Panels): return "panel16";
    case static_cast<uint32_t>(Packing::BlockPanels): return "panel16q";
    case static_cast<uint32_t>(Packing::PanelPairs): return "panel16x2";
    default: return nullptr;
  }
}

}  // namespace mmgpt
