// torch.save files (zip and legacy formats) and plain pickle files. The
// pickle machine (pickle.cpp) does the unpickling; this file locates the
// pickles and storage bytes in the container and turns raw storages into
// 1-D f32 storage values for the tensor rebuild functions.
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>

#include "formats/error.hpp"
#include "formats/file_bytes.hpp"
#include "formats/pickle.hpp"
#include "formats/source_element.hpp"
#include "formats/torch_checkpoint.hpp"
#include "formats/zip_reader.hpp"

namespace mmgpt {
namespace {

using pickle::Value;
using pickle::ValuePtr;

// Storage classes (torch.FloatStorage, ...) and, for newer writers, dtypes.
const SourceElementInfo* storage_type(const std::string& name) {
  static const std::unordered_map<std::string, std::string_view> torch_names = {
      {"torch.FloatStorage", "float32"},     {"torch.float32", "float32"},
      {"torch.HalfStorage", "float16"},      {"torch.float16", "float16"},
      {"torch.BFloat16Storage", "bfloat16"}, {"torch.bfloat16", "bfloat16"},
      {"torch.DoubleStorage", "float64"},    {"torch.float64", "float64"},
      {"torch.LongStorage", "int64"},        {"torch.int64", "int64"},
      {"torch.IntStorage", "int32"},         {"torch.int32", "int32"},
      {"torch.ShortStorage", "int16"},       {"torch.int16", "int16"},
      {"torch.CharStorage", "int8"},         {"torch.int8", "int8"},
      {"torch.ByteStorage", "uint8"},        {"torch.uint8", "uint8"},
      {"torch.BoolStorage", "bool"},         {"torch.bool", "bool"},
  };
  const auto it = torch_names.find(name);
  return it == torch_names.end() ? nullptr : source_element_by_torch_name(it->second);
}

// The float elements one load's tensors may hold: two per file byte (every
// storage byte once in a storage, once more in the tensors viewing it) plus
// room for views that repeat elements through zero strides. Tensors are read
// on demand, but a conversion reads each one it uses, so the cap bounds its work.
pickle::ElementBudget load_budget(size_t file_size) {
  return pickle::ElementBudget(2 * uint64_t(file_size) + (uint64_t(1) << 24));
}

// A storage as the unpickler wants it: a 1-D Tensor value, read on demand from
// the mapped file. With src == nullptr it is a placeholder (shape only, see pickle.hpp).
ValuePtr storage_value(const std::shared_ptr<const FileBytes>& file, const uint8_t* src, uint64_t numel,
                       const SourceElementInfo& type, pickle::ElementBudget& budget, const std::string& source) {
  std::shared_ptr<HostTensor> t;
  if (src) {
    budget.take(numel, source);
    t = std::make_shared<HostTensor>(stored_storage({file, src, type.element, numel}, std::string(type.torch)));
  } else {
    t = std::make_shared<HostTensor>();
    t->shape = {numel};
    t->source_dtype = type.torch;
  }
  auto v = std::make_shared<Value>();
  v->kind = Value::Kind::Tensor;
  v->tensor = std::move(t);
  return v;
}

// The fields of a persistent id ('storage', type, key, location, numel[, view]).
struct StorageRef {
  const SourceElementInfo* type;
  std::string key;
  uint64_t numel;
  const Value* view;  // legacy (view_key, offset, size) or nullptr
};

StorageRef parse_pid(const Value& pid, const std::string& source) {
  auto bad = [&](const std::string& what) -> Error { return Error(source + ": bad storage persistent id: " + what); };
  if (pid.kind != Value::Kind::Tuple || pid.items.size() < 5) throw bad("not a tuple of at least 5 items");
  const Value& tag = *pid.items[0];
  if (tag.kind != Value::Kind::String || tag.text != "storage") throw bad("first item is not 'storage'");
  const Value& type_name = *pid.items[1];
  if (type_name.kind != Value::Kind::String) throw bad("storage type is not a global");
  const SourceElementInfo* type = storage_type(type_name.text);
  if (!type) throw Error(source + ": unsupported storage type " + type_name.text);
  const Value& key = *pid.items[2];
  if (key.kind != Value::Kind::String) throw bad("storage key is not a string");
  const Value& numel = *pid.items[4];
  if (numel.kind != Value::Kind::Int || numel.integer < 0) throw bad("storage size is not a non-negative integer");
  const Value* view = pid.items.size() > 5 && pid.items[5]->kind != Value::Kind::None ? pid.items[5].get() : nullptr;
  return {type, key.text, static_cast<uint64_t>(numel.integer), view};
}

// numel * elem_size, refusing overflow.
uint64_t storage_bytes(uint64_t numel, uint64_t elem, const std::string& source, const std::string& key) {
  if (numel > UINT64_MAX / elem)
    throw Error(source + ": storage '" + key + "' size " + std::to_string(numel) + " overflows");
  return numel * elem;
}

// ---- zip format (torch >= 1.6) -----------------------------------------------

ValuePtr load_zip(const std::shared_ptr<const FileBytes>& file_ptr) {
  const FileBytes& file = *file_ptr;
  const std::string& path = file.path();
  const ZipReader zip(file.data(), file.size(), path);

  // The top folder is named after the file when it was saved, so search for it.
  const ZipEntry* pkl = nullptr;
  for (const ZipEntry& e : zip.entries()) {
    const size_t slash = e.name.find('/');
    if (slash != std::string::npos && slash > 0 && e.name.substr(slash) == "/data.pkl") {
      if (pkl) throw Error(path + ": zip holds more than one */data.pkl ('" + pkl->name + "', '" + e.name + "')");
      pkl = &e;
    }
  }
  if (!pkl) throw Error(path + ": zip archive has no <top>/data.pkl entry; not a torch.save checkpoint");
  const std::string top = pkl->name.substr(0, pkl->name.size() - std::string("data.pkl").size());

  if (const ZipEntry* order = zip.find(top + "byteorder")) {
    const auto b = zip.bytes(*order);
    const std::string value(reinterpret_cast<const char*>(b.data()), b.size());
    if (value != "little")
      throw Error(path + ": byteorder is '" + value.substr(0, 20) + "'; only little-endian checkpoints are supported");
  }

  const auto pkl_bytes = zip.bytes(*pkl);
  if (ZipReader::looks_like_zip(pkl_bytes.data(), pkl_bytes.size()))
    throw Error(path + ": entry '" + pkl->name + "' is itself a zip archive; nested archives are not supported");

  const std::string source = path + " (" + pkl->name + ")";
  pickle::ElementBudget budget = load_budget(file.size());
  std::unordered_map<std::string, ValuePtr> storages;  // shared storages (tied weights) are read once
  auto load = [&](const Value& pid) -> ValuePtr {
    const StorageRef ref = parse_pid(pid, source);
    if (auto it = storages.find(ref.key); it != storages.end()) {
      if (it->second->tensor->shape[0] != ref.numel || it->second->tensor->source_dtype != ref.type->torch)
        throw Error(source + ": storage '" + ref.key + "' is referenced with different sizes or types");
      return it->second;
    }
    const std::string name = top + "data/" + ref.key;
    const ZipEntry* entry = zip.find(name);
    if (!entry) throw Error(path + ": missing storage entry '" + name + "'");
    const uint64_t bytes = storage_bytes(ref.numel, ref.type->size, path, ref.key);
    if (entry->size != bytes)
      throw Error(path + ": storage entry '" + name + "' holds " + std::to_string(entry->size) + " bytes, expected " +
                  std::to_string(bytes) + " (" + std::to_string(ref.numel) + " x " + std::string(ref.type->torch) +
                  ")");
    ValuePtr v = storage_value(file_ptr, zip.bytes(*entry).data(), ref.numel, *ref.type, budget, path);
    storages.emplace(ref.key, v);
    return v;
  };
  return pickle::unpickle(pkl_bytes.data(), pkl_bytes.size(), source, load, &budget);
}

// ---- legacy format (torch < 1.6) ----------------------------------------------

// LONG1 with 10 bytes: the magic number 0x1950a86a20f9469cfc6c, little-endian.
constexpr uint8_t kLegacyMagic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

bool looks_legacy(const uint8_t* data, size_t size) {
  // The magic follows PROTO (and FRAME for protocol >= 4) within the first bytes.
  for (size_t at = 0; at < 16 && at + sizeof kLegacyMagic <= size; ++at)
    if (std::memcmp(data + at, kLegacyMagic, sizeof kLegacyMagic) == 0) return true;
  return false;
}

struct LegacyStorage {
  const SourceElementInfo* type = nullptr;
  uint64_t numel = 0;
  const uint8_t* bytes = nullptr;  // set once located in the file
};

ValuePtr load_legacy(const std::shared_ptr<const FileBytes>& file_ptr) {
  const FileBytes& file = *file_ptr;
  const std::string& path = file.path();
  const uint8_t* data = file.data();
  const size_t size = file.size();
  size_t pos = 0;
  pickle::ElementBudget budget = load_budget(size);
  auto next_pickle = [&](const char* what, const pickle::PersistentLoad& load = {}) {
    const std::string source = path + " (legacy " + std::string(what) + " pickle)";
    const size_t len = pickle::pickle_length(data + pos, size - pos, source);
    ValuePtr v = pickle::unpickle(data + pos, len, source, load, &budget);
    pos += len;
    return v;
  };

  pos += pickle::pickle_length(data, size, path + " (legacy magic number pickle)");
  const ValuePtr protocol = next_pickle("protocol version");
  if (!protocol->is_int() || protocol->integer != 1001) throw Error(path + ": legacy protocol version is not 1001");
  const ValuePtr sys_info = next_pickle("sys_info");
  const Value* little = sys_info->get("little_endian");
  if (!little || little->kind != Value::Kind::Bool || !little->boolean)
    throw Error(path + ": legacy checkpoint is not little-endian (sys_info.little_endian is not True)");

  // The storage bytes come after the main pickle and the key list, and their
  // element sizes are only known from the main pickle's persistent ids. So a
  // first pass reads the ids with placeholder storages, then the bytes are
  // located, then a second pass builds the tensors.
  const size_t main_pos = pos;
  const std::string main_source = path + " (legacy main pickle)";
  std::map<std::string, LegacyStorage> storages;
  std::unordered_map<std::string, ValuePtr> built;
  auto resolve = [&](const Value& pid, bool with_data) -> ValuePtr {
    const StorageRef ref = parse_pid(pid, main_source);
    LegacyStorage& s = storages[ref.key];
    if (s.type && s.type != ref.type)
      throw Error(main_source + ": storage '" + ref.key + "' is referenced with different types");
    if (s.type && s.numel != ref.numel)
      throw Error(main_source + ": storage '" + ref.key + "' is referenced with different sizes");
    s.type = ref.type;
    s.numel = ref.numel;
    storage_bytes(ref.numel, ref.type->size, path, ref.key);
    uint64_t offset = 0, numel = ref.numel;
    if (ref.view) {  // (view_key, offset, size): a slice of the root storage
      const Value& v = *ref.view;
      if (v.kind != Value::Kind::Tuple || v.items.size() != 3 || !v.items[1]->is_int() || !v.items[2]->is_int() ||
          v.items[1]->integer < 0 || v.items[2]->integer < 0 ||
          static_cast<uint64_t>(v.items[1]->integer) > ref.numel ||
          static_cast<uint64_t>(v.items[2]->integer) > ref.numel - static_cast<uint64_t>(v.items[1]->integer))
        throw Error(main_source + ": bad storage view metadata for '" + ref.key + "'");
      offset = static_cast<uint64_t>(v.items[1]->integer);
      numel = static_cast<uint64_t>(v.items[2]->integer);
    }
    if (!with_data) return storage_value(file_ptr, nullptr, numel, *ref.type, budget, main_source);
    // Each distinct slice is copied once, however often it is referenced.
    const std::string cache_key =
        ref.view ? ref.key + "#" + std::to_string(offset) + ":" + std::to_string(numel) : ref.key;
    if (auto it = built.find(cache_key); it != built.end()) return it->second;
    if (!s.bytes) throw Error(main_source + ": storage '" + ref.key + "' has no data in the file");
    ValuePtr v = storage_value(file_ptr, s.bytes + offset * ref.type->size, numel, *ref.type, budget, main_source);
    built.emplace(cache_key, v);
    return v;
  };

  next_pickle("main", [&](const Value& pid) { return resolve(pid, false); });
  const ValuePtr keys = next_pickle("storage keys");
  if (keys->kind != Value::Kind::List) throw Error(path + ": legacy storage key list is not a list");
  for (const auto& key : keys->items) {
    if (!key->is_str()) throw Error(path + ": legacy storage key is not a string");
    const auto it = storages.find(key->text);
    if (it == storages.end()) throw Error(path + ": legacy storage '" + key->text + "' is not used by the checkpoint");
    LegacyStorage& s = it->second;
    if (s.bytes) throw Error(path + ": legacy storage '" + key->text + "' is listed twice");
    if (size - pos < 8) throw Error(path + ": truncated before the size of storage '" + key->text + "'");
    const uint64_t numel = load_le<uint64_t>(data + pos);
    pos += 8;
    if (numel != s.numel)
      throw Error(path + ": legacy storage '" + key->text + "' has " + std::to_string(numel) +
                  " elements, the pickle says " + std::to_string(s.numel));
    const uint64_t bytes = storage_bytes(numel, s.type->size, path, key->text);
    if (bytes > size - pos)
      throw Error(path + ": legacy storage '" + key->text + "' (" + std::to_string(bytes) + " bytes at offset " +
                  std::to_string(pos) + ") runs past the end of the file");
    s.bytes = data + pos;
    pos += bytes;
  }

  pos = main_pos;
  return next_pickle("main", [&](const Value& pid) { return resolve(pid, true); });
}

}  // namespace

pickle::ValuePtr load_torch_file(const std::string& path) {
  const auto file = std::make_shared<const FileBytes>(path);
  if (ZipReader::looks_like_zip(file->data(), file->size())) return load_zip(file);
  if (looks_legacy(file->data(), file->size())) return load_legacy(file);
  throw Error(path + ": not a torch.save checkpoint (neither a zip archive nor the legacy format's magic number)");
}

pickle::ValuePtr load_pickle_file(const std::string& path) {
  const FileBytes file(path);
  return pickle::unpickle(file.data(), file.size(), path);
}

}  // namespace mmgpt
