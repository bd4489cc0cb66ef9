#pragma once
// Writing a file so that it appears complete or not at all: the bytes go to a
// temporary file beside the target (same directory, so rename() is atomic),
// which is flushed and renamed into place by commit(). If commit() is never
// reached (an exception, a full disk), the destructor removes the temporary
// and the target -- absent or an older file -- is left exactly as it was.
#include <cstdint>
#include <string>

namespace mmgpt {

class AtomicFile {
 public:
  // Throws mmgpt::Error naming `target` when its directory is missing, the
  // target is a directory, or the temporary cannot be created.
  explicit AtomicFile(const std::string& target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t n);  // throws mmgpt::Error on any short write
  void zeros(uint64_t n);
  void commit();                             // fsync, close, rename into place

 private:
  [[noreturn]] void fail(const char* what, int err);

  std::string target_, dir_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace mmgpt
