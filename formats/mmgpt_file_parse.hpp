#pragma once
// Parses and fully validates a .mmgpt image held in memory (a mapping or a
// test buffer). Only after every rule of docs/format.md has passed are the
// tensor data pointers formed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/mmgpt_file.hpp"

namespace mmgpt::mmgpt_file {

struct ParsedImage {
  uint32_t version = 0;
  ModelConfig config;
  StoredTokenizer tokenizer;  // points into the image
  std::vector<TensorView> tensors;  // data points into the image
  std::optional<StoredBpeTables> bpe_tables;  // points into the image
};

// `path` only names the file in error messages.
ParsedImage parse_image(const unsigned char* image, uint64_t size, const std::string& path);

}  // namespace mmgpt::mmgpt_file
