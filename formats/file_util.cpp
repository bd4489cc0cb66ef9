#include "formats/file_util.hpp"

#include <filesystem>
#include <fstream>

#include "formats/error.hpp"

namespace fs = std::filesystem;

namespace mmgpt {

std::string read_small_file(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error(path + ": no such file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw Error(path + ": cannot read its size: " + ec.message());
  if (size > max_bytes)
    throw Error(path + ": file is " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) +
                " this kind of file may have");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open for reading");
  std::string bytes(size_t(size), '\0');
  in.read(bytes.data(), std::streamsize(size));
  if (uint64_t(in.gcount()) != size) throw Error(path + ": short read");
  return bytes;
}

bool is_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

bool is_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return (fs::path(dir) / name).string();
}

std::string parent_dir(const std::string& file) {
  const fs::path p = fs::path(file).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else
      return false;
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace mmgpt
