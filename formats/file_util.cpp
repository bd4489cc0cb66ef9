#include "formats/file_util.hpp"

#include <array>
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

namespace {

// A DFA over the well-formed sequences of the Unicode standard (its table
// 3-7): the second byte's range depends on the first, which rules out overlong
// forms, surrogates and code points past U+10FFFF; later bytes are 80..BF.
// Each state is a multiple of 6, and kUtf8Next[byte] holds, at bit `state`,
// the 6 bits of the state that byte leads to: a step is one shift with no
// branch, whatever the bytes (a vocabulary mixes scripts token by token).
enum Utf8State : uint64_t {
  kAccept = 0,
  kReject = 6,
  kNeed1 = 12,     // one more byte, 80..BF
  kNeed2 = 18,     // two more, 80..BF
  kNeed3 = 24,     // three more, 80..BF
  kAfterE0 = 30,   // then A0..BF, 1 more
  kAfterED = 36,   // then 80..9F, 1 more
  kAfterF0 = 42,   // then 90..BF, 2 more
  kAfterF4 = 48,   // then 80..8F, 2 more
};

constexpr std::array<uint64_t, 256> make_utf8_next() {
  std::array<uint64_t, 256> next{};
  for (unsigned b = 0; b < 256; ++b) {
    auto go = [&](Utf8State from, Utf8State to) { next[b] |= uint64_t{to} << from; };
    const bool cont = b >= 0x80 && b <= 0xBF;
    go(kAccept, b < 0x80                             ? kAccept
                : b >= 0xC2 && b <= 0xDF             ? kNeed1
                : b == 0xE0                          ? kAfterE0
                : b == 0xED                          ? kAfterED
                : b >= 0xE1 && b <= 0xEF             ? kNeed2
                : b == 0xF0                          ? kAfterF0
                : b == 0xF4                          ? kAfterF4
                : b >= 0xF1 && b <= 0xF3             ? kNeed3
                                                     : kReject);
    go(kReject, kReject);
    go(kNeed1, cont ? kAccept : kReject);
    go(kNeed2, cont ? kNeed1 : kReject);
    go(kNeed3, cont ? kNeed2 : kReject);
    go(kAfterE0, b >= 0xA0 && b <= 0xBF ? kNeed1 : kReject);
    go(kAfterED, b >= 0x80 && b <= 0x9F ? kNeed1 : kReject);
    go(kAfterF0, b >= 0x90 && b <= 0xBF ? kNeed2 : kReject);
    go(kAfterF4, b >= 0x80 && b <= 0x8F ? kNeed2 : kReject);
  }
  return next;
}

constexpr std::array<uint64_t, 256> kUtf8Next = make_utf8_next();

}  // namespace

bool valid_utf8(std::string_view s) {
  uint64_t state = kAccept;
  for (const char ch : s) state = kUtf8Next[static_cast<unsigned char>(ch)] >> (state & 63);
  return (state & 63) == kAccept;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace mmgpt
