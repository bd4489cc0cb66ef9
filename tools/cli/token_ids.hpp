#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mmgpt::cli {

// Parses "I J K" (spaces, tabs, newlines or commas between ids). Throws
// mmgpt::Error naming the first entry that is not a non-negative integer
// within [0, vocab_size).
std::vector<int32_t> parse_token_ids(const std::string& text, uint64_t vocab_size);

}  // namespace mmgpt::cli
