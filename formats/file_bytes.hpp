#pragma once
// A whole input file mapped read-only. Readers parse checkpoints in place
// instead of copying multi-gigabyte files into memory.
#include <cstddef>
#include <cstdint>
#include <string>

namespace mmgpt {

class FileBytes {
 public:
  // Throws mmgpt::Error naming the file when it cannot be opened or mapped.
  explicit FileBytes(const std::string& path);
  ~FileBytes();
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mmgpt
