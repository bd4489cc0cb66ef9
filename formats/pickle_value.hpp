#pragma once
// The values a restricted unpickler can produce. Python objects outside this
// small set are never constructed: a pickle that asks for any other global is
// refused by name before anything happens (see pickle.hpp).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/host_tensor.hpp"

namespace mmgpt::pickle {

struct Value;
using ValuePtr = std::shared_ptr<const Value>;

struct Value {
  enum class Kind { None, Bool, Int, Float, String, Bytes, List, Tuple, Dict, Tensor };
  Kind kind = Kind::None;

  bool boolean = false;
  int64_t integer = 0;
  double real = 0.0;
  std::string text;                                    // String (UTF-8) or Bytes (raw)
  std::vector<ValuePtr> items;                         // List, Tuple
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;  // Dict, in insertion order
  std::shared_ptr<const HostTensor> tensor;            // Tensor (already f32, contiguous)

  bool is_dict() const { return kind == Kind::Dict; }
  bool is_str() const { return kind == Kind::String; }
  bool is_int() const { return kind == Kind::Int; }
  bool is_tensor() const { return kind == Kind::Tensor; }

  // Dict lookup by string key; nullptr when this is not a dict or the key is absent.
  const Value* get(std::string_view key) const {
    if (kind != Kind::Dict) return nullptr;
    for (const auto& [k, v] : entries)
      if (k && k->kind == Kind::String && k->text == key) return v.get();
    return nullptr;
  }
};

}  // namespace mmgpt::pickle
