#pragma once
// Small, careful file helpers for the readers of checkpoints and tokenizer files.
#include <cstdint>
#include <string>

namespace mmgpt {

// The whole file as bytes; refuses files larger than `max_bytes` (config and
// tokenizer files are small: a huge one is a wrong path, not data to slurp).
std::string read_small_file(const std::string& path, uint64_t max_bytes = uint64_t(256) << 20);

bool is_file(const std::string& path);
bool is_directory(const std::string& path);
// `dir`/`name` (dir may be empty: then just name).
std::string join_path(const std::string& dir, const std::string& name);
// The directory holding `file` ("." when it has none).
std::string parent_dir(const std::string& file);

// Whether `s` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool valid_utf8(std::string_view s);
// Number of code points in well-formed UTF-8 `s`.
size_t utf8_length(const std::string& s);

}  // namespace mmgpt
