#include "formats/zip_reader.hpp"

#include <algorithm>
#include <cstring>

#include "formats/error.hpp"

namespace mmgpt {
namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kEocd64LocatorSig = 0x07064b50;
constexpr uint32_t kEocd64Sig = 0x06064b50;
constexpr size_t kEocdSize = 22;
constexpr size_t kCentralSize = 46;
constexpr size_t kLocalSize = 30;

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Bounds-checked little-endian reads relative to the whole archive.
struct Bytes {
  const uint8_t* data;
  size_t size;
  const std::string& source;

  [[noreturn]] void fail(const std::string& what) const { throw Error(source + ": corrupt zip archive: " + what); }
  // True when [offset, offset+len) lies inside the file, without overflow.
  bool fits(uint64_t offset, uint64_t len) const { return offset <= size && len <= size - offset; }
  uint64_t read(uint64_t offset, int n, const char* field) const {
    if (!fits(offset, static_cast<uint64_t>(n)))
      fail(std::string(field) + " at offset " + std::to_string(offset) + " lies past the end of the file");
    return le(data + offset, n);
  }
};

}  // namespace

bool ZipReader::looks_like_zip(const uint8_t* data, size_t size) {
  return size >= 4 && (le(data, 4) == kLocalHeaderSig || le(data, 4) == kEocdSig);
}

ZipReader::ZipReader(const uint8_t* data, size_t size, std::string source)
    : data_(data), source_(std::move(source)) {
  const Bytes b{data, size, source_};
  if (size < kEocdSize)
    b.fail("file of " + std::to_string(size) + " bytes is too short for an end-of-central-directory record");

  // The EOCD record sits at the end, followed only by a comment of at most 64 KiB.
  size_t eocd = SIZE_MAX;
  const size_t lowest = size >= kEocdSize + 0xffff ? size - kEocdSize - 0xffff : 0;
  for (size_t pos = size - kEocdSize + 1; pos-- > lowest;) {
    if (le(data + pos, 4) == kEocdSig && pos + kEocdSize + le(data + pos + 20, 2) == size) {
      eocd = pos;
      break;
    }
  }
  if (eocd == SIZE_MAX) b.fail("no end-of-central-directory record (truncated file?)");

  uint64_t count = le(data + eocd + 10, 2);
  uint64_t cd_size = le(data + eocd + 12, 4);
  uint64_t cd_offset = le(data + eocd + 16, 4);
  if (le(data + eocd + 4, 2) != 0 || le(data + eocd + 6, 2) != 0) b.fail("multi-disk archives are not supported");

  // Zip64: a locator just before the EOCD points at the 64-bit record.
  if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    if (eocd < 20 || le(data + eocd - 20, 4) != kEocd64LocatorSig) b.fail("zip64 values without a zip64 locator");
    const uint64_t rec = le(data + eocd - 20 + 8, 8);
    if (b.read(rec, 4, "zip64 end-of-central-directory record") != kEocd64Sig || !b.fits(rec, 56))
      b.fail("bad zip64 end-of-central-directory record at offset " + std::to_string(rec));
    count = le(data + rec + 32, 8);
    cd_size = le(data + rec + 40, 8);
    cd_offset = le(data + rec + 48, 8);
  }
  if (!b.fits(cd_offset, cd_size))
    b.fail("central directory (offset " + std::to_string(cd_offset) + ", size " + std::to_string(cd_size) +
           ") lies outside the file of " + std::to_string(size) + " bytes");
  if (count > cd_size / kCentralSize)
    b.fail("entry count " + std::to_string(count) + " does not fit in the central directory");

  entries_.reserve(static_cast<size_t>(count));  // bounded by the directory's size just above
  struct Span {
    uint64_t begin, end;
    size_t entry;  // SIZE_MAX: the central directory
  };
  std::vector<Span> spans;
  spans.reserve(static_cast<size_t>(count) + 1);
  uint64_t pos = cd_offset;
  const uint64_t cd_end = cd_offset + cd_size;
  for (uint64_t i = 0; i < count; ++i) {
    if (cd_end - pos < kCentralSize || b.read(pos, 4, "central directory entry") != kCentralSig)
      b.fail("bad central directory entry " + std::to_string(i) + " at offset " + std::to_string(pos));
    const uint8_t* h = data + pos;
    const uint64_t flags = le(h + 8, 2), method = le(h + 10, 2);
    uint64_t comp = le(h + 20, 4), uncomp = le(h + 24, 4);
    const uint64_t name_len = le(h + 28, 2), extra_len = le(h + 30, 2), comment_len = le(h + 32, 2);
    uint64_t local = le(h + 42, 4);
    const uint64_t var_len = name_len + extra_len + comment_len;
    if (cd_end - pos - kCentralSize < var_len)
      b.fail("central directory entry " + std::to_string(i) + " runs past the directory");
    std::string name(reinterpret_cast<const char*>(h + kCentralSize), name_len);

    // Zip64 extended information: the 0xffffffff fields, in this order.
    const uint8_t* extra = h + kCentralSize + name_len;
    for (uint64_t e = 0; e + 4 <= extra_len;) {
      const uint64_t id = le(extra + e, 2), len = le(extra + e + 2, 2);
      if (e + 4 + len > extra_len) b.fail("entry '" + name + "' has a malformed extra field");
      if (id == 0x0001) {
        uint64_t at = e + 4;
        auto take = [&](uint64_t& field) {
          if (field != 0xffffffff) return;
          if (at + 8 > e + 4 + len) b.fail("entry '" + name + "' has a short zip64 extra field");
          field = le(extra + at, 8);
          at += 8;
        };
        take(uncomp);
        take(comp);
        take(local);
      }
      e += 4 + len;
    }

    if (flags & 1) b.fail("entry '" + name + "' is encrypted");
    if (method != 0)
      throw Error(source_ + ": zip entry '" + name + "' is compressed (method " + std::to_string(method) +
                  "); torch checkpoints store entries uncompressed and mmgpt does not decompress, so this file "
                  "was not written by torch.save (re-save it with torch.save)");
    if (comp != uncomp)
      b.fail("stored entry '" + name + "' has compressed size " + std::to_string(comp) + " != uncompressed size " +
             std::to_string(uncomp));

    // The local header repeats the name and has its own extra field (torch pads with it for alignment).
    if (b.read(local, 4, "local header") != kLocalHeaderSig || !b.fits(local, kLocalSize))
      b.fail("entry '" + name + "' has no local header at offset " + std::to_string(local));
    const uint64_t lflags = le(data + local + 6, 2), lmethod = le(data + local + 8, 2);
    const uint64_t lname = le(data + local + 26, 2), lextra = le(data + local + 28, 2);
    // The local header's own flags and method are what an extracting tool
    // trusts; an entry whose two headers disagree is refused, not interpreted.
    if (lmethod != method || (lflags & 1))
      b.fail("entry '" + name + "': local header (method " + std::to_string(lmethod) + ", flags " +
             std::to_string(lflags) + ") does not match the central directory (method 0, not encrypted)");
    const uint64_t data_offset = local + kLocalSize + lname + lextra;
    if (!b.fits(local + kLocalSize, lname + lextra) || !b.fits(data_offset, uncomp))
      b.fail("entry '" + name + "' (offset " + std::to_string(data_offset) + ", size " + std::to_string(uncomp) +
             ") lies outside the file of " + std::to_string(size) + " bytes");
    if (lname != name_len || std::memcmp(data + local + kLocalSize, name.data(), name_len) != 0)
      b.fail("entry '" + name + "': local header name does not match the central directory");

    if (!index_.emplace(name, entries_.size()).second) b.fail("duplicate entry '" + name + "'");
    entries_.push_back(ZipEntry{std::move(name), data_offset, uncomp});
    spans.push_back({local, data_offset + uncomp, entries_.size() - 1});
    pos += kCentralSize + var_len;
  }

  // Entries (local header through data) may not share bytes with each other
  // or with the central directory: a writer never does that, and overlapping
  // entries are how zip bombs make a small file claim many copies of its data.
  spans.push_back({cd_offset, cd_end, SIZE_MAX});
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.begin < y.begin; });
  auto label = [&](size_t i) {
    return i == SIZE_MAX ? std::string("the central directory") : "entry '" + entries_[i].name + "'";
  };
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end)
      b.fail(label(spans[i].entry) + " (at offset " + std::to_string(spans[i].begin) + ") overlaps " +
             label(spans[i - 1].entry) + " (offsets " + std::to_string(spans[i - 1].begin) + " to " +
             std::to_string(spans[i - 1].end) + ")");
}

const ZipEntry* ZipReader::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

}  // namespace mmgpt
