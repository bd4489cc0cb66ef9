#pragma once
// For fuzz targets whose entry point takes a path (the loaders map files with
// FileBytes): each input is rewritten into one per-process file in /dev/shm
// (memory-backed, so the rewrite costs no disk I/O), removed at exit.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mmgpt::fuzz {

class InputFile {
 public:
  explicit InputFile(const std::string& suffix) : path_("/dev/shm/mmgpt-fuzz-" + std::to_string(::getpid()) + suffix) {}
  ~InputFile() { std::remove(path_.c_str()); }

  // Replaces the file's contents with the input; aborts (a harness bug, not a finding) on failure.
  const std::string& write(const uint8_t* data, size_t size) const {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
      std::perror(path_.c_str());
      std::abort();
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Reads every byte of a span the parser handed back, so that AddressSanitizer
// sees any view pointing outside the input.
inline uint8_t touch(const void* p, uint64_t n) {
  const auto* b = static_cast<const volatile uint8_t*>(p);
  return n ? static_cast<uint8_t>(b[0] ^ b[n - 1]) : 0;
}

}  // namespace mmgpt::fuzz
