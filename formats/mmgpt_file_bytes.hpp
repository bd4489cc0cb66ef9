#pragma once
// Little-endian encoding/decoding and a bounds-checked cursor over one region
// of a .mmgpt image. The cursor never forms a pointer outside its region: each
// read first checks that the bytes are there, with subtraction only (no
// `pos + n` that could wrap), and the error names the region and the field.
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/error.hpp"

namespace mmgpt::mmgpt_file {

inline uint32_t load_u32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline uint64_t load_u64(const unsigned char* p) { return uint64_t(load_u32(p)) | uint64_t(load_u32(p + 4)) << 32; }

inline void store_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void store_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// Appends little-endian values to a growing byte buffer (the writer's metadata).
struct ByteSink {
  std::vector<unsigned char> bytes;
  void u8(uint8_t v) { bytes.push_back(v); }
  void u32(uint32_t v) {
    bytes.resize(bytes.size() + 4);
    store_u32(bytes.data() + bytes.size() - 4, v);
  }
  void u64(uint64_t v) {
    bytes.resize(bytes.size() + 8);
    store_u64(bytes.data() + bytes.size() - 8, v);
  }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (bytes.size() % alignment) bytes.push_back(0);
  }
};

// Reads fields from [begin, end) of the image; offsets in messages are absolute.
class ByteCursor {
 public:
  ByteCursor(const unsigned char* image, uint64_t begin, uint64_t end, std::string where)
      : image_(image), pos_(begin), end_(end), where_(std::move(where)) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return end_ - pos_; }
  // The next 4 bytes as a u32, not consumed; remaining() >= 4 is the caller's to check.
  uint32_t peek_u32() const { return load_u32(image_ + pos_); }
  const std::string& where() const { return where_; }

  uint8_t u8(const std::string& field) { return *take(1, field); }
  uint32_t u32(const std::string& field) { return load_u32(take(4, field)); }
  uint64_t u64(const std::string& field) { return load_u64(take(8, field)); }
  int64_t i64(const std::string& field) { return static_cast<int64_t>(u64(field)); }
  float f32(const std::string& field) { return std::bit_cast<float>(u32(field)); }
  std::string bytes(uint64_t n, const std::string& field) { return std::string(view(n, field)); }
  std::string_view view(uint64_t n, const std::string& field) {
    const unsigned char* p = take(n, field);
    return {reinterpret_cast<const char*>(p), static_cast<size_t>(n)};
  }

 private:
  const unsigned char* take(uint64_t n, const std::string& field) {
    if (n > end_ - pos_)
      throw Error(where_ + ": " + field + " at offset " + std::to_string(pos_) + " needs " + std::to_string(n) +
                  " bytes but only " + std::to_string(end_ - pos_) + " remain in the section");
    const unsigned char* p = image_ + pos_;
    pos_ += n;
    return p;
  }

  const unsigned char* image_;
  uint64_t pos_, end_;
  std::string where_;
};

}  // namespace mmgpt::mmgpt_file
