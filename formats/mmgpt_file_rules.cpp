// Shared .mmgpt validation rules (see mmgpt_file_rules.hpp and docs/format.md).
#include "formats/mmgpt_file_rules.hpp"

#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "formats/mmgpt_file.hpp"
#include "formats/mmgpt_file_layout.hpp"

namespace mmgpt::mmgpt_file {
namespace {

// `what()` names the string; called only for an error message.
template <class What>
void check_string(std::string_view s, const What& what_name, const std::string& source) {
  if (!s.empty() && s.size() <= kMaxStringBytes && valid_utf8(s)) return;
  const std::string what = what_name();
  if (s.empty()) throw Error(source + ": " + what + " is empty");
  if (s.size() > kMaxStringBytes)
    throw Error(source + ": " + what + " is " + std::to_string(s.size()) + " bytes (limit " +
                std::to_string(kMaxStringBytes) + ")");
  if (!valid_utf8(s)) throw Error(source + ": " + what + " is not valid UTF-8");
}

const char* tokenizer_kind_name(uint32_t kind) {
  switch (kind) {
    case static_cast<uint32_t>(TokenizerKind::None): return "none";
    case static_cast<uint32_t>(TokenizerKind::Char): return "char";
    case static_cast<uint32_t>(TokenizerKind::Gpt2Bpe): return "gpt2-bpe";
    case static_cast<uint32_t>(TokenizerKind::Bpe): return "bpe";
    default: return nullptr;
  }
}

}  // namespace

namespace {

// "q8_0 and q4_0": the dtypes packed as `layout_id`.
std::string dtypes_in_layout(uint32_t layout_id) {
  std::vector<std::string_view> names;
  for (uint32_t id = 0; const WeightTypeInfo* t = weight_type_by_id(id); ++id)
    if (static_cast<uint32_t>(t->packing) == layout_id) names.push_back(t->name);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + std::string(names[i]);
  return s;
}

// "0 = row-major, 1 = panel16, ...": every layout this reader knows.
std::string layout_ids() {
  std::string s;
  for (uint32_t id = 0; const char* name = layout_name(id); ++id)
    s += (id == 0 ? "" : ", ") + std::to_string(id) + " = " + name;
  return s;
}

}  // namespace

uint32_t file_layout_id(WeightType dtype, Layout layout) {
  // An unknown dtype or layout keeps its id, for check_tensor_entry to name.
  const WeightTypeInfo* t = weight_type_by_id(static_cast<uint32_t>(dtype));
  return layout == Layout::Panel16 && t ? static_cast<uint32_t>(t->packing) : static_cast<uint32_t>(layout);
}

Layout memory_layout(uint32_t layout_id) { return layout_id == kLayoutRowMajor ? Layout::RowMajor : Layout::Panel16; }

bool tensor_bytes(uint32_t dtype_id, uint32_t layout_id, const std::vector<uint64_t>& shape, uint64_t& bytes) {
  const WeightTypeInfo* t = weight_type_by_id(dtype_id);
  if (t == nullptr) return false;
  if (layout_id != kLayoutRowMajor) return shape.size() == 2 && packed_matrix_bytes(t->type, shape[0], shape[1], bytes);
  if (!t->element_wise) return false;
  bytes = t->block_bytes;
  for (uint64_t dim : shape)
    if (__builtin_mul_overflow(bytes, dim, &bytes)) return false;
  return true;
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

// TokenizerData (owned strings) or StoredTokenizer (views into a file): the same rules.
template <class Tok>
void check_tokenizer_fields(const Tok& tok, const ModelConfig& config, const std::string& source,
                            size_t checked_tokens) {
  const auto kind = static_cast<uint32_t>(tok.kind);
  const char* kind_name = tokenizer_kind_name(kind);
  if (!kind_name)
    throw Error(source + ": tokenizer kind has unknown id " + std::to_string(kind) +
                " (known: 0 = none, 1 = char, 2 = gpt2-bpe, 3 = bpe)");
  const std::string where = source + ": tokenizer (" + kind_name + ")";
  const uint64_t n_tokens = tok.tokens.size();
  if (tok.kind == TokenizerKind::None) {
    if (n_tokens != 0) throw Error(where + ": token_count is " + std::to_string(n_tokens) + " (must be 0)");
  } else {
    if (n_tokens == 0) throw Error(where + ": token_count is 0 (must be at least 1)");
    if (n_tokens > config.vocab_size)
      throw Error(where + ": token_count " + std::to_string(n_tokens) + " exceeds config vocab_size " +
                  std::to_string(config.vocab_size));
  }
  if (tok.kind != TokenizerKind::Gpt2Bpe && tok.kind != TokenizerKind::Bpe && !tok.merges.empty())
    throw Error(where + ": merge_count is " + std::to_string(tok.merges.size()) +
                " (merges are only allowed for gpt2-bpe and bpe)");
  if (tok.merges.size() > kMaxMerges)
    throw Error(where + ": merge_count " + std::to_string(tok.merges.size()) + " exceeds limit " +
                std::to_string(kMaxMerges));
  // For kind none the eos id still names a row of the vocabulary (runs on ids).
  const uint64_t id_limit = tok.kind == TokenizerKind::None ? config.vocab_size : n_tokens;
  if (tok.eos_id < -1 || (tok.eos_id >= 0 && static_cast<uint64_t>(tok.eos_id) >= id_limit))
    throw Error(where + ": eos_id " + std::to_string(tok.eos_id) + " is out of range (must be -1 or below " +
                std::to_string(id_limit) + ")");
  for (size_t i = checked_tokens; i < tok.tokens.size(); ++i)
    check_string(tok.tokens[i], [i] { return "tokenizer token " + std::to_string(i); }, source);
  for (size_t i = 0; i < tok.merges.size(); ++i) {
    check_string(tok.merges[i].first, [i] { return "tokenizer merge " + std::to_string(i) + " left part"; }, source);
    check_string(tok.merges[i].second, [i] { return "tokenizer merge " + std::to_string(i) + " right part"; },
                 source);
  }
}

}  // namespace

void check_tokenizer(const TokenizerData& tok, const ModelConfig& config, const std::string& source) {
  check_tokenizer_fields(tok, config, source, 0);
}

void check_tokenizer(const StoredTokenizer& tok, const ModelConfig& config, const std::string& source,
                     size_t checked_tokens) {
  check_tokenizer_fields(tok, config, source, checked_tokens);
}

void check_tensor_entry(const std::string& name, uint32_t dtype_id, uint32_t layout_id,
                        const std::vector<uint64_t>& shape, uint64_t nbytes, const std::string& source) {
  if (name.empty() || name.size() > kMaxNameBytes)
    throw Error(source + ": tensor name length " + std::to_string(name.size()) + " is out of range (1 to " +
                std::to_string(kMaxNameBytes) + ")");
  for (unsigned char ch : name)
    if (ch < 0x21 || ch > 0x7e)
      throw Error(source + ": tensor name contains byte " + std::to_string(ch) +
                  " (names are printable ASCII without spaces)");
  const std::string where = source + ": tensor '" + name + "'";
  const WeightTypeInfo* type = weight_type_by_id(dtype_id);
  if (type == nullptr)
    throw Error(where + ": unknown dtype id " + std::to_string(dtype_id) + " (this reader knows " + weight_type_ids() +
                "; the file needs a newer mmgpt)");
  const char* layout = layout_name(layout_id);
  if (layout == nullptr)
    throw Error(where + ": unknown layout id " + std::to_string(layout_id) + " (this reader knows " + layout_ids() +
                "; the file needs a newer mmgpt)");
  const std::string dtype(type->name);
  if (shape.size() > kMaxDims)
    throw Error(where + ": ndim " + std::to_string(shape.size()) + " exceeds limit " + std::to_string(kMaxDims));
  if (layout_id != kLayoutRowMajor && shape.size() != 2)
    throw Error(where + ": layout " + layout + " needs a matrix, but the shape is " + shape_string(shape));
  const uint32_t packing = static_cast<uint32_t>(type->packing);
  // Layout 1 with a dtype that has a packing of its own is an older panel order, which this reader does not run.
  if (layout_id == static_cast<uint32_t>(Packing::Panels) && type->packing == Packing::BlockPanels)
    throw Error(where + ": dtype " + dtype +
                " in layout panel16 is the block order of files written by mmgpt before 2026-11-24, which this "
                "reader no longer runs; convert the checkpoint again (quantized matrices are now layout 2, panel16q)");
  if (layout_id == static_cast<uint32_t>(Packing::Panels) && type->packing == Packing::PanelPairs)
    throw Error(
        where + ": dtype " + dtype +
        " in layout panel16 is the panel order of files written by mmgpt before layout 3 (2026-11-24), which "
        "this reader no longer runs; convert the checkpoint again (16-bit matrices are now layout 3, panel16x2)");
  if (layout_id != kLayoutRowMajor && layout_id != packing)
    throw Error(where + ": layout " + layout + " is only for dtypes " + dtypes_in_layout(layout_id) +
                " (this tensor is " + dtype + ")");
  if (layout_id == kLayoutRowMajor && !type->any_tensor)
    throw Error(where + ": dtype " + dtype + " is only allowed in layout " + layout_name(packing) +
                " (this tensor is " + layout + ")");
  uint64_t bytes = 0;
  if (!tensor_bytes(dtype_id, layout_id, shape, bytes))
    throw Error(where + ": shape " + shape_string(shape) + " overflows a 64-bit byte count");
  if (bytes != nbytes)
    throw Error(where + ": nbytes " + std::to_string(nbytes) + " does not match shape " + shape_string(shape) +
                " in layout " + layout_name(layout_id) + " (expected " + std::to_string(bytes) + ")");
}

void check_tensor_set(const std::vector<NamedShape>& tensors, const ModelConfig& config, const std::string& source) {
  std::unordered_map<std::string_view, const NamedShape*> by_name;
  by_name.reserve(tensors.size());
  for (const NamedShape& t : tensors)
    if (!by_name.emplace(*t.name, &t).second) throw Error(source + ": tensor '" + *t.name + "' appears more than once");
  const std::vector<TensorSpec> required = required_tensors(config);
  std::unordered_set<std::string_view> required_names;
  required_names.reserve(required.size());
  for (const TensorSpec& spec : required) {
    required_names.insert(spec.name);
    auto it = by_name.find(spec.name);
    if (it == by_name.end())
      throw Error(source + ": missing tensor '" + spec.name + "' (shape " + shape_string(spec.shape) +
                  ") required by the config");
    if (*it->second->shape != spec.shape)
      throw Error(source + ": tensor '" + spec.name + "' has shape " + shape_string(*it->second->shape) +
                  " but the config requires " + shape_string(spec.shape));
    if (!weight_type_info(it->second->dtype).any_tensor && !spec.matrix)
      throw Error(source + ": tensor '" + spec.name + "' has dtype " +
                  std::string(weight_type_name(it->second->dtype)) +
                  ", which only the weight matrices of the matmuls may have (everything else is f32)");
    if (it->second->layout == Layout::Panel16 && !spec.matrix)
      throw Error(source + ": tensor '" + spec.name +
                  "' has layout panel16, which only the weight matrices of the matmuls may have");
  }
  for (const NamedShape& t : tensors)
    if (!required_names.count(*t.name))
      throw Error(source + ": unexpected tensor '" + *t.name + "' (not required by the config)");
}

}  // namespace mmgpt::mmgpt_file
