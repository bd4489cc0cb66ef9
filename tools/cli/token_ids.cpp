#include "tools/cli/token_ids.hpp"

#include <charconv>

#include "formats/error.hpp"

namespace mmgpt::cli {

std::vector<int32_t> parse_token_ids(const std::string& text, uint64_t vocab_size) {
  std::vector<int32_t> ids;
  size_t i = 0;
  auto separator = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ','; };
  while (i < text.size()) {
    while (i < text.size() && separator(text[i])) ++i;
    if (i == text.size()) break;
    size_t j = i;
    while (j < text.size() && !separator(text[j])) ++j;
    const std::string item = text.substr(i, j - i);
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (ec != std::errc() || end != item.data() + item.size())
      throw Error("--ids: '" + item + "' is not a token id (expected non-negative integers separated by spaces)");
    if (value >= vocab_size)
      throw Error("--ids: token id " + item + " is outside the vocabulary (0.." + std::to_string(vocab_size - 1) + ")");
    ids.push_back(static_cast<int32_t>(value));
    i = j;
  }
  if (ids.empty()) throw Error("--ids: no token ids given");
  return ids;
}

}  // namespace mmgpt::cli
