#pragma once
// The flat name -> tensor map a checkpoint's model weights come down to, and
// the bookkeeping a layout mapper needs to prove it used every tensor: a
// wrong layout or a model variant we do not understand must be refused by
// name, never turned silently into a file of garbage.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/host_tensor.hpp"

namespace mmgpt::convert {

using TensorPtr = std::shared_ptr<const HostTensor>;

struct StateDict {
  std::vector<std::pair<std::string, TensorPtr>> entries;  // checkpoint order

  const HostTensor* find(std::string_view name) const;
  bool has(std::string_view name) const { return find(name) != nullptr; }
};

// "[768, 2304]"
std::string shape_str(const std::vector<uint64_t>& shape);

// "a, b, c and 7 more": for error messages that list names.
std::string name_list(const std::vector<std::string>& names, size_t max_shown = 8);

// Hands out tensors by name with the shape the layout expects and records
// which ones were used. Every error names the checkpoint file and the layout.
class TensorTaker {
 public:
  TensorTaker(const StateDict& weights, std::string file, std::string layout);

  bool has(std::string_view name) const { return weights_.has(name); }
  // The tensor `name`, which must exist (for reading shapes before the config is known).
  const HostTensor& peek(const std::string& name) const;
  // Throws one error listing every name absent from the checkpoint.
  void require(const std::vector<std::string>& names) const;
  // The tensor `name` with exactly `shape`; marks it used.
  TensorPtr take(const std::string& name, const std::vector<uint64_t>& shape);
  // A known buffer (causal masks) that carries no weights: used if present.
  void ignore(const std::string& name);
  // Throws naming every tensor nothing took or ignored.
  void finish() const;

  const std::string& file() const { return file_; }
  const std::string& layout() const { return layout_; }

 private:
  const StateDict& weights_;
  std::string file_;
  std::string layout_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<bool> used_;
};

// The number of layers n of a checkpoint whose per-layer keys read
// "<prefix>N.<rest>": the indices found must be exactly 0..n-1 (a gap is an
// error naming the missing layer). Zero layers is an error too.
uint32_t count_layers(const StateDict& weights, std::string_view prefix, const std::string& file);

}  // namespace mmgpt::convert
