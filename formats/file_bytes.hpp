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

  // Drops the whole pages inside [p, p + n) from this process's memory once
  // they have been read (they stay in the page cache, and reading them again
  // maps them again), so that streaming through a large file keeps the
  // resident set small. Throws mmgpt::Error naming the file where mapping
  // them afresh fails (the fallback off Linux); the range is then unreadable.
  void release(const uint8_t* p, size_t n) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;  // kept open: where pages cannot be dropped in place, release maps them afresh
};

}  // namespace mmgpt
