#pragma once
// Validation rules of the .mmgpt format that the reader and the writer both
// apply, so that the writer can never produce a file the reader refuses.
// Every function throws mmgpt::Error whose message starts with `source`
// (the file path) and names the field and the bad value.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/model_config.hpp"

namespace mmgpt {
struct StoredTokenizer;
}  // namespace mmgpt

namespace mmgpt::mmgpt_file {

// The file layout id of a tensor: 0 for row-major, else its dtype's packing
// (core/weight_type.hpp). In memory every packing is Layout::Panel16: the
// dtype says how the panels are arranged.
uint32_t file_layout_id(WeightType dtype, Layout layout);
Layout memory_layout(uint32_t layout_id);  // a known id, as the engine sees it

// Tokenizer sanity against the config: kind known; Char/Gpt2Bpe have 1..vocab_size
// tokens, None has none; tokens are non-empty valid UTF-8 of at most
// kMaxStringBytes; merges only for Gpt2Bpe, each half non-empty valid UTF-8;
// eos_id is -1 or a valid id (of the tokens, or of the vocabulary for None).
void check_tokenizer(const TokenizerData& tok, const ModelConfig& config, const std::string& source);
// `checked_tokens`: how many leading tokens the caller has already checked
// by these rules (the reader checks them as it reads them).
void check_tokenizer(const StoredTokenizer& tok, const ModelConfig& config, const std::string& source,
                     size_t checked_tokens = 0);

// One directory entry on its own (file ids): name well-formed, dtype and
// layout known, a packed matrix in its dtype's packing and only element-wise
// dtypes row-major, at most kMaxDims dims, stored bytes (tensor_bytes)
// computed without overflow and equal to nbytes. Does not look at offsets.
void check_tensor_entry(const std::string& name, uint32_t dtype_id, uint32_t layout_id,
                        const std::vector<uint64_t>& shape, uint64_t nbytes, const std::string& source);

// The set of tensors against required_tensors(config): no duplicate names,
// every required tensor present with exactly its shape, nothing extra.
// Panel16 and the 16-bit dtypes are allowed only for the required tensors marked `matrix`.
struct NamedShape {
  const std::string* name;
  const std::vector<uint64_t>* shape;
  Layout layout = Layout::RowMajor;
  WeightType dtype = WeightType::F32;
};
void check_tensor_set(const std::vector<NamedShape>& tensors, const ModelConfig& config, const std::string& source);

// Bytes a tensor of this shape occupies in this layout (file ids; packed:
// 2-D only, core/weight_type.hpp's packed_matrix_bytes), or false on overflow
// or a shape the layout cannot hold (the caller reports which).
bool tensor_bytes(uint32_t dtype_id, uint32_t layout_id, const std::vector<uint64_t>& shape, uint64_t& bytes);

// "[1, 2, 3]" for messages.
std::string shape_string(const std::vector<uint64_t>& shape);

}  // namespace mmgpt::mmgpt_file
