#pragma once
// Validation rules of the .mmgpt format that the reader and the writer both
// apply, so that the writer can never produce a file the reader refuses.
// Every function throws mmgpt::Error whose message starts with `source`
// (the file path) and names the field and the bad value.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/model_config.hpp"

namespace mmgpt::mmgpt_file {

// Bytes per element of a known dtype id, or 0 when the id is unknown.
// Bytes per element of an element-wise dtype (f32, bf16, f16); 0 for the
// block-quantized ones (q8_0, q4_0: see tensor_bytes) and unknown ids.
uint64_t dtype_size(uint32_t dtype_id);
const char* dtype_name(uint32_t dtype_id);  // "f32", "bf16", "f16", "q8_0", "q4_0", or nullptr
bool layout_known(uint32_t layout_id);

// Layout ids in the file. 0 and 1 are Layout::RowMajor and Layout::Panel16;
// 2 (panel16q) is the panel16 arrangement of the q8_0 / q4_0 blocks, each
// panel in units of two blocks whose scales follow their quants
// (kernels/quant_layout.hpp). In memory a panel16q tensor is Layout::Panel16
// with a quantized dtype: the dtype says how its panels are laid out. (The
// q8_0 / q4_0 panels of files written before 2026-11-24, layout 1, kept all
// of a panel's scales after all its quants; they are refused, see
// check_tensor_entry.) 3 (panel16x2) is the panel16 arrangement of bf16 / f16
// matrices with the lines of each pair of panels alternating
// (kernels/panel_layout.hpp); in memory also Layout::Panel16 with a 16-bit
// dtype. (Files written before layout 3 (2026-11-24) hold 16-bit matrices in layout 1,
// one panel after another; refused the same way.)
inline constexpr uint32_t kLayoutPanel16Q = 2;
inline constexpr uint32_t kLayoutPanel16Pairs = 3;
uint32_t file_layout_id(DType dtype, Layout layout);  // what the writer stores
Layout memory_layout(uint32_t layout_id);             // a known id, as the engine sees it

// Tokenizer sanity against the config: kind known; Char/Gpt2Bpe have 1..vocab_size
// tokens, None has none; tokens are non-empty valid UTF-8 of at most
// kMaxStringBytes; merges only for Gpt2Bpe, each half non-empty valid UTF-8;
// eos_id is -1 or a valid id (of the tokens, or of the vocabulary for None).
void check_tokenizer(const TokenizerData& tok, const ModelConfig& config, const std::string& source);

// One directory entry on its own (file ids): name well-formed, dtype and
// layout known, a 16-bit dtype only in layout panel16x2 and q8_0 / q4_0 only
// in panel16q (and nothing else in either), at most kMaxDims dims, stored bytes
// (tensor_bytes) computed without overflow and equal to nbytes. Does not look
// at offsets.
void check_tensor_entry(const std::string& name, uint32_t dtype_id, uint32_t layout_id,
                        const std::vector<uint64_t>& shape, uint64_t nbytes, const std::string& source);

// The set of tensors against required_tensors(config): no duplicate names,
// every required tensor present with exactly its shape, nothing extra.
// Panel16 and the 16-bit dtypes are allowed only for the required tensors marked `matrix`.
struct NamedShape {
  const std::string* name;
  const std::vector<uint64_t>* shape;
  Layout layout = Layout::RowMajor;
  DType dtype = DType::F32;
};
void check_tensor_set(const std::vector<NamedShape>& tensors, const ModelConfig& config, const std::string& source);

// Bytes a tensor of this shape occupies in this layout (file ids; Panel16:
// 2-D only, rows rounded up to whole panels of 16), or false on overflow or a
// shape the layout cannot hold (the caller reports which).
// q8_0 / q4_0 (panel16q only): ceil(N/16) panels of ceil(Kb/2) units,
// Kb = ceil(K/32), each unit 2 * 512 + 64 (q8_0) or 2 * 256 + 64 (q4_0) bytes.
bool tensor_bytes(uint32_t dtype_id, uint32_t layout_id, const std::vector<uint64_t>& shape, uint64_t& bytes);
const char* layout_name(uint32_t layout_id);  // "row-major", "panel16", "panel16q", "panel16x2", or nullptr

// "[1, 2, 3]" for messages.
std::string shape_string(const std::vector<uint64_t>& shape);

}  // namespace mmgpt::mmgpt_file
