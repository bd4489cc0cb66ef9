#pragma once
// A zip reader for what torch.save writes: stored (uncompressed) entries,
// zip64 records when the archive is large. Every offset and size is checked
// against the file length before use; compressed or encrypted entries are
// refused. The reader does not own the bytes (see FileBytes).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mmgpt {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // where the entry's bytes start in the archive
  uint64_t size = 0;         // stored size == uncompressed size
};

class ZipReader {
 public:
  // `source` names the archive in error messages. Throws mmgpt::Error.
  ZipReader(const uint8_t* data, size_t size, std::string source);

  // True when the bytes start like a zip archive (local header or empty-archive EOCD).
  static bool looks_like_zip(const uint8_t* data, size_t size);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(std::string_view name) const;  // nullptr when absent
  std::span<const uint8_t> bytes(const ZipEntry& entry) const {
    return {data_ + entry.data_offset, static_cast<size_t>(entry.size)};
  }
  const std::string& source() const { return source_; }

 private:
  const uint8_t* data_;
  std::string source_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace mmgpt
