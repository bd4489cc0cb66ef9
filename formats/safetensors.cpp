// .safetensors: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the tensor bytes, offsets relative to the end of the header.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "formats/error.hpp"
#include "formats/file_bytes.hpp"
#include "formats/half.hpp"
#include "formats/torch_checkpoint.hpp"

namespace mmgpt {
namespace {

// Real headers are kilobytes; the reference implementation caps them at 100 MB.
constexpr uint64_t kMaxHeader = 100u << 20;

enum class Kind { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool };

struct DType {
  const char* name;   // in the file
  const char* torch;  // HostTensor::source_dtype
  uint64_t size;
  Kind kind;
};

// Floating dtypes are what models hold; the others are converted too so that
// a file carrying an integer buffer (position ids, masks) still loads.
constexpr DType kDTypes[] = {
    {"F32", "float32", 4, Kind::F32}, {"F16", "float16", 2, Kind::F16}, {"BF16", "bfloat16", 2, Kind::BF16},
    {"F64", "float64", 8, Kind::F64}, {"I64", "int64", 8, Kind::I64},   {"I32", "int32", 4, Kind::I32},
    {"I16", "int16", 2, Kind::I16},   {"I8", "int8", 1, Kind::I8},      {"U8", "uint8", 1, Kind::U8},
    {"BOOL", "bool", 1, Kind::Bool},
};

template <typename T>
T load(const uint8_t* p) {  // tensor data need not be aligned
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void convert(const uint8_t* src, uint64_t numel, Kind kind, float* dst) {
  for (uint64_t i = 0; i < numel; ++i) {
    switch (kind) {
      case Kind::F32: dst[i] = load<float>(src + 4 * i); break;
      case Kind::F16: dst[i] = f16_to_f32(load<uint16_t>(src + 2 * i)); break;
      case Kind::BF16: dst[i] = bf16_to_f32(load<uint16_t>(src + 2 * i)); break;
      case Kind::F64: dst[i] = static_cast<float>(load<double>(src + 8 * i)); break;
      case Kind::I64: dst[i] = static_cast<float>(load<int64_t>(src + 8 * i)); break;
      case Kind::I32: dst[i] = static_cast<float>(load<int32_t>(src + 4 * i)); break;
      case Kind::I16: dst[i] = static_cast<float>(load<int16_t>(src + 2 * i)); break;
      case Kind::I8: dst[i] = static_cast<float>(static_cast<int8_t>(src[i])); break;
      case Kind::U8: dst[i] = static_cast<float>(src[i]); break;
      case Kind::Bool: dst[i] = src[i] ? 1.0f : 0.0f; break;
    }
  }
}

struct Entry {
  std::string name;
  const DType* dtype;
  std::vector<uint64_t> shape;
  uint64_t begin, end;
};

}  // namespace

std::vector<std::pair<std::string, HostTensor>> load_safetensors(const std::string& path) {
  const FileBytes file(path);
  const uint8_t* data = file.data();
  const uint64_t size = file.size();
  auto fail = [&](const std::string& what) -> Error { return Error(path + ": bad safetensors file: " + what); };

  if (size < 8) throw fail("file of " + std::to_string(size) + " bytes is shorter than the 8-byte header length");
  uint64_t header_len;
  std::memcpy(&header_len, data, 8);
  if (header_len > kMaxHeader) throw fail("header length " + std::to_string(header_len) + " exceeds " + std::to_string(kMaxHeader));
  if (header_len > size - 8)
    throw fail("header length " + std::to_string(header_len) + " exceeds the " + std::to_string(size - 8) + " bytes after it");
  const uint8_t* body = data + 8 + header_len;
  const uint64_t body_size = size - 8 - header_len;

  // ordered_json keeps the header's order, which callers see.
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(data + 8, data + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw fail("header is not a JSON object");

  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;  // free-form string map, not needed
    const std::string where = "tensor '" + name + "'";
    if (!info.is_object()) throw fail(where + " is not an object");
    const auto dt = info.find("dtype"), sh = info.find("shape"), off = info.find("data_offsets");
    if (dt == info.end() || !dt->is_string()) throw fail(where + " has no string 'dtype'");
    const std::string dtype = dt->get<std::string>();
    const DType* d = nullptr;
    for (const DType& k : kDTypes)
      if (dtype == k.name) d = &k;
    if (!d) throw fail(where + " has unsupported dtype '" + dtype + "'");
    if (sh == info.end() || !sh->is_array()) throw fail(where + " has no 'shape' array");
    Entry e{name, d, {}, 0, 0};
    uint64_t numel = 1;
    for (const auto& s : *sh) {
      if (!s.is_number_unsigned()) throw fail(where + " has a shape entry that is not a non-negative integer: " + s.dump());
      const uint64_t n = s.get<uint64_t>();
      if (n != 0 && numel > UINT64_MAX / n) throw fail(where + " shape overflows");
      numel *= n;
      e.shape.push_back(n);
    }
    if (off == info.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
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
    HostTensor t;
    t.shape = e.shape;
    t.source_dtype = e.dtype->torch;
    const uint64_t numel = (e.end - e.begin) / e.dtype->size;
    t.data.resize(static_cast<size_t>(numel));
    convert(body + e.begin, numel, e.dtype->kind, t.data.data());
    out.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace mmgpt
