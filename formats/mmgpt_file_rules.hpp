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

// Tokenizer sanity against the config: kind known; Char/Gpt2Bpe have 1..vocab_size
// tokens, None has none; tokens are non-empty valid UTF-8 of at most
// kMaxStringBytes; merges only for Gpt2Bpe, each half non-empty valid UTF-8;
// eos_id is -1 or a valid id (of the tokens, or of the vocabulary for None).
void check_tokenizer(const TokenizerData& tok, const ModelConfig& config, const std::string& source);

// One directory entry on its own: name well-formed, dtype and layout known,
// a 16-bit dtype only in layout panel16, at most kMaxDims dims, stored bytes (tensor_bytes) computed without
// overflow and equal to nbytes. Does not look at offsets.
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

// Bytes a tensor of this shape occupies in this layout (Panel16: 2-D only, rows
// rounded up to whole panels of 16), or false on overflow or a shape the layout
// cannot hold (the caller reports which).
// q8_0 / q4_0 (panel16 only): ceil(N/16) panels of Kb = ceil(K/32) blocks,
// each panel Kb * 512 (q8_0) or Kb * 256 (q4_0) bytes of quants plus Kb * 32
// bytes of f16 scales rounded up to a multiple of 64.
bool tensor_bytes(uint32_t dtype_id, uint32_t layout_id, const std::vector<uint64_t>& shape, uint64_t& bytes);
const char* layout_name(uint32_t layout_id);  // "row-major", "panel16", or nullptr

// "[1, 2, 3]" for messages.
std::string shape_string(const std::vector<uint64_t>& shape);

}  // namespace mmgpt::mmgpt_file
