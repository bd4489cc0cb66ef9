// .safetensors: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the tensor bytes, offsets relative to the end of the header.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "formats/error.hpp"
#include "formats/file_bytes.hpp"
#include "formats/source_element.hpp"
#include "formats/torch_checkpoint.hpp"

namespace mmgpt {
namespace {

// Real headers are kilobytes; the reference implementation caps them at 100 MB.
constexpr uint64_t kMaxHeader = 100u << 20;
// A header is {name: {field: scalar or [scalars]}}: three levels of nesting.
// Deeper values are refused while parsing, and shapes are capped, so what the
// parser holds stays a small multiple of the header's bytes (a generic JSON
// document of nested arrays would cost ~50 bytes of memory per header byte).
constexpr int kMaxNesting = 3;
constexpr size_t kMaxShapeDims = 64;

struct Entry {
  std::string name;
  const SourceElementInfo* dtype;
  std::vector<uint64_t> shape;
  uint64_t begin, end;
};

using Json = nlohmann::json;

// One tensor's fields as the header gives them (null when absent): scalars,
// or arrays of scalars. Validated after the whole header has parsed.
struct RawTensor {
  std::string name;
  Json dtype, shape, offsets;
};

// Reads the header as a stream of JSON events into RawTensors, in header
// order, refusing what no safetensors header holds (deeper nesting, a tensor
// that is not an object, a name given twice) as soon as it appears.
class HeaderReader : public nlohmann::json_sax<Json> {
 public:
  explicit HeaderReader(std::function<Error(const std::string&)> fail) : fail_(std::move(fail)) {}
  std::vector<RawTensor> tensors;

  bool null() override { return scalar(Json()); }
  bool boolean(bool v) override { return scalar(Json(v)); }
  bool number_integer(number_integer_t v) override { return scalar(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(Json(v)); }
  bool string(string_t& v) override { return scalar(Json(v)); }
  bool binary(binary_t&) override { return scalar(Json()); }

  bool start_object(std::size_t) override {
    enter();
    if (depth_ == 2 && !in_metadata_) tensors.push_back({key_, Json(), Json(), Json()});
    if (depth_ == 3 && keep()) *field_ = Json::object();  // kept only to be refused as the wrong type
    return true;
  }
  bool end_object() override { return leave(); }
  bool start_array(std::size_t) override {
    enter();
    if (depth_ == 1) throw fail_("header is not a JSON object");
    if (depth_ == 2 && !in_metadata_) throw fail_("tensor '" + key_ + "' is not an object");
    if (depth_ == 3 && keep()) *field_ = Json::array();
    return true;
  }
  bool end_array() override { return leave(); }

  bool key(string_t& k) override {
    if (depth_ == 1) {
      in_metadata_ = k == "__metadata__";
      if (!in_metadata_ && !names_.insert(k).second) throw fail_("tensor '" + k + "' appears twice in the header");
      key_ = k;
    } else if (depth_ == 2 && !in_metadata_) {
      field_ = k == "dtype"          ? &tensors.back().dtype
               : k == "shape"        ? &tensors.back().shape
               : k == "data_offsets" ? &tensors.back().offsets
                                     : nullptr;  // other fields are ignored
      if (field_ && !field_->is_null()) throw fail_("tensor '" + key_ + "' gives '" + k + "' twice");
    }
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw fail_(std::string("header is not valid JSON: ") + e.what());
  }

 private:
  std::function<Error(const std::string&)> fail_;
  int depth_ = 0;
  bool in_metadata_ = false;
  std::string key_;
  std::unordered_set<std::string> names_;
  Json* field_ = nullptr;  // where the values of the current tensor field go, if kept

  void enter() {
    if (++depth_ > kMaxNesting)
      throw fail_("header nests values deeper than " + std::to_string(kMaxNesting) + " levels");
  }
  bool leave() {
    if (--depth_ == 2) field_ = nullptr;
    return true;
  }
  bool keep() const { return !in_metadata_ && field_; }
  // A scalar field value (depth 2) or an array element (depth 3) of a kept field.
  void store(Json v) {
    if (!keep()) return;
    if (depth_ == 2) {
      *field_ = std::move(v);
    } else if (field_->is_array()) {
      if (field_->size() >= kMaxShapeDims)
        throw fail_("tensor '" + key_ + "' has an array of more than " + std::to_string(kMaxShapeDims) + " values");
      field_->push_back(std::move(v));
    }
  }
  bool scalar(Json v) {
    if (depth_ == 0) throw fail_("header is not a JSON object");
    if (depth_ == 1 && !in_metadata_) throw fail_("tensor '" + key_ + "' is not an object");
    store(std::move(v));
    return true;
  }
};

}  // namespace

std::vector<std::pair<std::string, HostTensor>> load_safetensors(const std::string& path) {
  const auto file_ptr = std::make_shared<const FileBytes>(path);
  const FileBytes& file = *file_ptr;
  const uint8_t* data = file.data();
  const uint64_t size = file.size();
  auto fail = [&](const std::string& what) -> Error { return Error(path + ": bad safetensors file: " + what); };

  if (size < 8) throw fail("file of " + std::to_string(size) + " bytes is shorter than the 8-byte header length");
  uint64_t header_len;
  std::memcpy(&header_len, data, 8);
  if (header_len > kMaxHeader)
    throw fail("header length " + std::to_string(header_len) + " exceeds " + std::to_string(kMaxHeader));
  if (header_len > size - 8)
    throw fail("header length " + std::to_string(header_len) + " exceeds the " + std::to_string(size - 8) +
               " bytes after it");
  const uint8_t* body = data + 8 + header_len;
  const uint64_t body_size = size - 8 - header_len;

  // Streamed, so that nothing is built for what the format never holds; the
  // tensors come back in header order, which callers see.
  HeaderReader reader(fail);
  try {
    Json::sax_parse(data + 8, data + 8 + header_len, &reader);
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("header is not valid JSON: ") + e.what());
  }

  std::vector<Entry> entries;
  entries.reserve(reader.tensors.size());
  for (const RawTensor& raw : reader.tensors) {
    const std::string& name = raw.name;
    const std::string where = "tensor '" + name + "'";
    const Json *dt = &raw.dtype, *sh = &raw.shape, *off = &raw.offsets;
    if (!dt->is_string()) throw fail(where + " has no string 'dtype'");
    const std::string dtype = dt->get<std::string>();
    const SourceElementInfo* d = source_element_by_safetensors_name(dtype);
    if (!d) throw fail(where + " has unsupported dtype '" + dtype + "'");
    if (!sh->is_array()) throw fail(where + " has no 'shape' array");
    Entry e{name, d, {}, 0, 0};
    uint64_t numel = 1;
    for (const auto& s : *sh) {
      if (!s.is_number_unsigned())
        throw fail(where + " has a shape entry that is not a non-negative integer: " + s.dump());
      const uint64_t n = s.get<uint64_t>();
      if (n != 0 && numel > UINT64_MAX / n) throw fail(where + " shape overflows");
      numel *= n;
      e.shape.push_back(n);
    }
    if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      throw fail(where + " has no 'data_offsets' pair of non-negative integers");
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    if (e.begin > e.end || e.end > body_size)
      throw fail(where + " data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                 "] are outside the " + std::to_string(body_size) + " data bytes");
    if (numel > UINT64_MAX / d->size || numel * d->size != e.end - e.begin)
      throw fail(where + " has " + std::to_string(e.end - e.begin) + " data bytes, its shape and dtype " + dtype +
                 " need " + (numel > UINT64_MAX / d->size ? std::string("more") : std::to_string(numel * d->size)));
    entries.push_back(std::move(e));
  }

  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      throw fail("tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name + "' overlap");

  std::vector<std::pair<std::string, HostTensor>> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) {
    const uint64_t numel = (e.end - e.begin) / e.dtype->size;
    auto storage = std::make_shared<const HostTensor>(
        stored_storage({file_ptr, body + e.begin, e.dtype->element, numel}, std::string(e.dtype->torch)));
    std::vector<uint64_t> strides(e.shape.size(), 1);  // C order
    for (size_t d = e.shape.size(); d-- > 1;) strides[d - 1] = strides[d] * e.shape[d];
    out.emplace_back(e.name, strided_view(std::move(storage), 0, e.shape, std::move(strides)));
  }
  return out;
}

}  // namespace mmgpt
