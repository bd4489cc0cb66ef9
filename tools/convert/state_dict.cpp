#include "tools/convert/state_dict.hpp"

#include <algorithm>
#include <set>

#include "formats/error.hpp"

namespace mmgpt::convert {

const HostTensor* StateDict::find(std::string_view name) const {
  for (const auto& [key, tensor] : entries)
    if (key == name) return tensor.get();
  return nullptr;
}

std::string shape_str(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string name_list(const std::vector<std::string>& names, size_t max_shown) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max_shown; ++i) {
    if (i) s += ", ";
    s += names[i];
  }
  if (names.size() > max_shown) s += " and " + std::to_string(names.size() - max_shown) + " more";
  return s;
}

TensorTaker::TensorTaker(const StateDict& weights, std::string file, std::string layout)
    : weights_(weights), file_(std::move(file)), layout_(std::move(layout)), used_(weights.entries.size(), false) {
  for (size_t i = 0; i < weights_.entries.size(); ++i) index_.emplace(weights_.entries[i].first, i);
}

const HostTensor& TensorTaker::peek(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error(file_ + ": tensor '" + name + "' required by layout " + layout_ + " is missing");
  return *weights_.entries[it->second].second;
}

void TensorTaker::require(const std::vector<std::string>& names) const {
  std::vector<std::string> missing;
  for (const auto& n : names)
    if (!index_.count(n)) missing.push_back(n);
  if (!missing.empty())
    throw Error(file_ + ": not a complete " + layout_ + " checkpoint: missing " + std::to_string(missing.size()) +
                " tensor(s): " + name_list(missing));
}

TensorPtr TensorTaker::take(const std::string& name, const std::vector<uint64_t>& shape) {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error(file_ + ": tensor '" + name + "' required by layout " + layout_ + " is missing");
  const TensorPtr& t = weights_.entries[it->second].second;
  if (t->shape != shape)
    throw Error(file_ + ": tensor '" + name + "' has shape " + shape_str(t->shape) + ", layout " + layout_ +
                " expects " + shape_str(shape));
  used_[it->second] = true;
  return t;
}

void TensorTaker::ignore(const std::string& name) {
  auto it = index_.find(name);
  if (it != index_.end()) used_[it->second] = true;
}

void TensorTaker::finish() const {
  std::vector<std::string> unknown;
  for (size_t i = 0; i < used_.size(); ++i)
    if (!used_[i]) unknown.push_back(weights_.entries[i].first);
  if (!unknown.empty())
    throw Error(file_ + ": " + std::to_string(unknown.size()) + " tensor(s) unknown to layout " + layout_ +
                " (refusing to drop weights silently): " + name_list(unknown));
}

uint32_t count_layers(const StateDict& weights, std::string_view prefix, const std::string& file) {
  constexpr uint64_t kMaxLayers = 100000;  // far beyond any GPT; bounds the digits we accept
  std::set<uint64_t> found;
  for (const auto& [key, tensor] : weights.entries) {
    if (key.size() <= prefix.size() || key.compare(0, prefix.size(), prefix) != 0) continue;
    size_t pos = prefix.size();
    size_t end = pos;
    while (end < key.size() && key[end] >= '0' && key[end] <= '9' && end - pos < 7) ++end;
    bool ok = end > pos && end < key.size() && key[end] == '.' && !(key[pos] == '0' && end - pos > 1);
    uint64_t n = 0;
    if (ok)
      for (size_t i = pos; i < end; ++i) n = n * 10 + uint64_t(key[i] - '0');
    if (!ok || n >= kMaxLayers)
      throw Error(file + ": tensor '" + key + "' does not carry a valid layer index after '" + std::string(prefix) +
                  "'");
    found.insert(n);
  }
  if (found.empty()) throw Error(file + ": no layer tensors ('" + std::string(prefix) + "0.…') found");
  uint64_t expect = 0;
  for (uint64_t n : found) {
    if (n != expect)
      throw Error(file + ": layer " + std::to_string(expect) + " is missing (no '" + std::string(prefix) +
                  std::to_string(expect) + ".…' tensors, but layer " + std::to_string(n) + " exists)");
    ++expect;
  }
  return uint32_t(found.size());
}

}  // namespace mmgpt::convert
