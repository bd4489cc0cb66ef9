// Hostile files against every parser of outside data (zip, pickle, torch.save,
// safetensors, .mmgpt): each one declares absurd sizes or counts, or abuses
// the format's structure, and must be refused with a clear mmgpt::Error while
// the parser's allocations stay bounded. The bound is measured, not assumed:
// this executable counts every operator new (tests/alloc_counter.hpp).
#include "alloc_counter.hpp"
#include "bounds_testing.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "formats/error.hpp"
#include "formats/mmgpt_file.hpp"
#include "formats/mmgpt_file_bytes.hpp"
#include "formats/mmgpt_file_layout.hpp"
#include "formats/pickle.hpp"
#include "formats/torch_checkpoint.hpp"

namespace {

using bounds_testing::MiB;
using bounds_testing::refused_within;

std::string tmp(const std::string& name) {
  const std::string dir = std::string(MMGPT_TEST_TMP) + "/formats_bounds";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// ---- little-endian and pickle building blocks --------------------------------

std::string le(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}
void put(std::string& s, size_t at, uint64_t v, int n) { s.replace(at, n, le(v, n)); }

std::string binint(int32_t v) { return "J" + le(static_cast<uint32_t>(v), 4); }
std::string str(const std::string& s) { return "X" + le(s.size(), 4) + s; }

mmgpt::pickle::ValuePtr unpickle(const std::string& bytes) {
  return mmgpt::pickle::unpickle(bytes.data(), bytes.size(), "hostile.pkl");
}

// A torch.save pickle: a list of `views` tensors rebuilt from storage '0'
// (float32, `numel` elements), view i at offset `offset(i)` with the given
// size and stride. The global and the persistent id are memoized once.
std::string rebuild_list(uint64_t numel, size_t views, const std::function<int32_t(size_t)>& offset,
                         const std::vector<int32_t>& size, const std::vector<int32_t>& stride) {
  std::string p = "\x80\x02]q";
  p += '\0';  // memo slot 0 for the list
  p += '(';
  for (size_t i = 0; i < views; ++i) {
    if (i == 0) {
      p += "ctorch._utils\n_rebuild_tensor_v2\nq\x01(";
      p += "(" + str("storage") + "ctorch\nFloatStorage\n" + str("0") + str("cpu") + "J" + le(numel, 4) + "tq\x02Q";
    } else {
      p += "h\x01(h\x02Q";
    }
    p += binint(offset(i)) + "(";
    for (int32_t s : size) p += binint(s);
    p += "t(";
    for (int32_t s : stride) p += binint(s);
    p += "t\x89"
         "ccollections\nOrderedDict\n)RtR";
  }
  return p + "e.";
}

// ---- a zip writer (stored entries), with access to every header ------------

struct ZipEntryBytes {
  std::string name, data;
};

struct Zip {
  std::string bytes;
  std::vector<size_t> local;    // offset of each local header
  std::vector<size_t> central;  // offset of each central directory entry
  size_t eocd = 0;
};

Zip make_zip(const std::vector<ZipEntryBytes>& entries) {
  Zip z;
  for (const auto& e : entries) {
    z.local.push_back(z.bytes.size());
    z.bytes += le(0x04034b50, 4) + le(20, 2) + le(0, 2) + le(0, 2) + le(0, 4) + le(0, 4) + le(e.data.size(), 4) +
               le(e.data.size(), 4) + le(e.name.size(), 2) + le(0, 2) + e.name + e.data;
  }
  const size_t cd = z.bytes.size();
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    z.central.push_back(z.bytes.size());
    z.bytes += le(0x02014b50, 4) + le(20, 2) + le(20, 2) + le(0, 2) + le(0, 2) + le(0, 4) + le(0, 4) +
               le(e.data.size(), 4) + le(e.data.size(), 4) + le(e.name.size(), 2) + le(0, 2) + le(0, 2) + le(0, 2) +
               le(0, 2) + le(0, 4) + le(z.local[i], 4) + e.name;
  }
  z.eocd = z.bytes.size();
  z.bytes += le(0x06054b50, 4) + le(0, 2) + le(0, 2) + le(entries.size(), 2) + le(entries.size(), 2) +
             le(z.eocd - cd, 4) + le(cd, 4) + le(0, 2);
  return z;
}

std::string f32_storage(uint64_t numel) { return std::string(numel * 4, '\0'); }

// A well-formed checkpoint: one tensor of 4 floats.
Zip tiny_checkpoint() {
  return make_zip({{"archive/data.pkl", rebuild_list(4, 1, [](size_t) { return 0; }, {4}, {1})},
                   {"archive/data/0", f32_storage(4)}});
}

void load_torch(const std::string& bytes) {
  const std::string path = tmp("hostile.pt");
  write_file(path, bytes);
  mmgpt::load_torch_file(path);
}

void load_safetensors(const std::string& header, const std::string& data = "") {
  const std::string path = tmp("hostile.safetensors");
  write_file(path, le(header.size(), 8) + header + data);
  mmgpt::load_safetensors(path);
}

}  // namespace

// ---- zip ------------------------------------------------------------------------

TEST_CASE("the zip fixtures are sound") {
  const std::string path = tmp("tiny.pt");
  write_file(path, tiny_checkpoint().bytes);
  const auto root = mmgpt::load_torch_file(path);
  REQUIRE(root->kind == mmgpt::pickle::Value::Kind::List);
  CHECK(root->items.size() == 1);
}

TEST_CASE("zip: absurd sizes and counts are refused before anything is allocated for them") {
  const Zip good = tiny_checkpoint();
  // An entry that declares 2^40 bytes through a zip64 extra field.
  {
    std::string b = good.bytes;
    const size_t c = good.central[1];
    put(b, c + 20, 0xffffffff, 4);
    put(b, c + 24, 0xffffffff, 4);
    const std::string extra = le(1, 2) + le(16, 2) + le(uint64_t(1) << 40, 8) + le(uint64_t(1) << 40, 8);
    put(b, c + 30, extra.size(), 2);
    const size_t name_end = c + 46 + std::string("archive/data/0").size();
    b.insert(name_end, extra);
    put(b, good.eocd + extra.size() + 12, good.eocd + extra.size() - good.central[0], 4);
    refused_within(MiB, [&] { load_torch(b); }, {"hostile.pt", "archive/data/0", "outside the file"});
  }
  // A zip64 end record that claims 2^40 entries.
  {
    std::string b = good.bytes;
    const size_t cd = good.central[0], cd_size = good.eocd - cd;
    const size_t rec = good.eocd;
    std::string zip64 = le(0x06064b50, 4) + le(44, 8) + le(45, 2) + le(45, 2) + le(0, 4) + le(0, 4) +
                        le(uint64_t(1) << 40, 8) + le(uint64_t(1) << 40, 8) + le(cd_size, 8) + le(cd, 8);
    zip64 += le(0x07064b50, 4) + le(0, 4) + le(rec, 8) + le(1, 4);
    b.insert(rec, zip64);
    put(b, rec + zip64.size() + 10, 0xffff, 2);
    refused_within(MiB, [&] { load_torch(b); }, {"entry count 1099511627776"});
  }
  // The 16-bit entry count far beyond what the central directory holds.
  {
    std::string b = good.bytes;
    put(b, good.eocd + 10, 0xfffe, 2);
    refused_within(MiB, [&] { load_torch(b); }, {"entry count 65534"});
  }
  // A central directory size that wraps offset + size around 2^64 (zip64).
  {
    std::string b = good.bytes;
    const size_t rec = good.eocd;
    std::string zip64 = le(0x06064b50, 4) + le(44, 8) + le(45, 2) + le(45, 2) + le(0, 4) + le(0, 4) + le(2, 8) +
                        le(2, 8) + le(~uint64_t(0) - 8, 8) + le(16, 8);
    zip64 += le(0x07064b50, 4) + le(0, 4) + le(rec, 8) + le(1, 4);
    b.insert(rec, zip64);
    put(b, rec + zip64.size() + 16, 0xffffffff, 4);
    refused_within(MiB, [&] { load_torch(b); }, {"central directory", "outside the file"});
  }
  // A zip64 extra field shorter than the sizes it must carry.
  {
    std::string b = good.bytes;
    const size_t c = good.central[1];
    put(b, c + 24, 0xffffffff, 4);
    const std::string extra = le(1, 2) + le(4, 2) + le(0, 4);
    put(b, c + 30, extra.size(), 2);
    b.insert(c + 46 + std::string("archive/data/0").size(), extra);
    put(b, good.eocd + extra.size() + 12, good.eocd + extra.size() - good.central[0], 4);
    refused_within(MiB, [&] { load_torch(b); }, {"short zip64 extra field"});
  }
  // A zip64 extra field whose uncompressed size disagrees with the compressed one.
  {
    std::string b = good.bytes;
    const size_t c = good.central[1];
    put(b, c + 24, 0xffffffff, 4);
    const std::string extra = le(1, 2) + le(8, 2) + le(uint64_t(1) << 40, 8);
    put(b, c + 30, extra.size(), 2);
    b.insert(c + 46 + std::string("archive/data/0").size(), extra);
    put(b, good.eocd + extra.size() + 12, good.eocd + extra.size() - good.central[0], 4);
    refused_within(MiB, [&] { load_torch(b); }, {"compressed size 16 != uncompressed size 1099511627776"});
  }
}

TEST_CASE("zip: overlapping entries, header mismatches, compressed and nested entries are refused") {
  const Zip good = tiny_checkpoint();
  const Zip three = make_zip({{"archive/data.pkl", rebuild_list(4, 1, [](size_t) { return 0; }, {4}, {1})},
                              {"archive/data/0", f32_storage(4)},
                              {"archive/data/1", f32_storage(4)}});
  // Two directory entries for the same local header (the zip-bomb trick).
  {
    std::string b = three.bytes;
    put(b, three.central[2] + 42, three.local[1], 4);
    b[three.central[2] + 46 + 13] = '0';  // the local header's name must match, so both say data/0
    refused_within(MiB, [&] { load_torch(b); }, {"duplicate entry 'archive/data/0'"});
    b[three.central[2] + 46 + 13] = '1';
    refused_within(MiB, [&] { load_torch(b); }, {"local header name does not match"});
  }
  // An entry whose data covers the next entry's local header and data.
  {
    std::string b = three.bytes;
    put(b, three.central[1] + 20, 16 + 30 + 14 + 16, 4);
    put(b, three.central[1] + 24, 16 + 30 + 14 + 16, 4);
    refused_within(MiB, [&] { load_torch(b); }, {"entry 'archive/data/1'", "overlaps entry 'archive/data/0'"});
  }
  // An entry whose data runs into the central directory.
  {
    std::string b = good.bytes;
    put(b, good.central[1] + 20, 24, 4);
    put(b, good.central[1] + 24, 24, 4);
    refused_within(MiB, [&] { load_torch(b); }, {"the central directory", "overlaps entry 'archive/data/0'"});
  }
  // The central directory says stored, the local header says deflate.
  {
    std::string b = good.bytes;
    put(b, good.local[0] + 8, 8, 2);
    refused_within(MiB, [&] { load_torch(b); }, {"local header (method 8", "does not match"});
  }
  // A compressed (deflate) data entry: torch never writes one, mmgpt never inflates.
  {
    std::string b = good.bytes;
    put(b, good.central[1] + 10, 8, 2);
    put(b, good.local[1] + 8, 8, 2);
    refused_within(MiB, [&] { load_torch(b); },
                   {"'archive/data/0' is compressed (method 8)", "store entries uncompressed", "does not decompress"});
  }
  // data.pkl that is itself a zip archive.
  {
    const Zip inner = tiny_checkpoint();
    const Zip z = make_zip({{"archive/data.pkl", inner.bytes}, {"archive/data/0", f32_storage(4)}});
    refused_within(MiB, [&] { load_torch(z.bytes); }, {"'archive/data.pkl' is itself a zip archive", "nested"});
  }
}

TEST_CASE("torch.save: declared storage sizes and repeated views stay bounded") {
  // The pickle declares a storage of 2^31-1 floats (8 GiB); the entry holds 16 bytes.
  {
    const Zip z = make_zip({{"archive/data.pkl", rebuild_list(0x7fffffff, 1, [](size_t) { return 0; }, {4}, {1})},
                            {"archive/data/0", f32_storage(4)}});
    refused_within(MiB, [&] { load_torch(z.bytes); }, {"holds 16 bytes, expected 8589934588"});
  }
  // 2000 views of one 1 MiB storage, each at a different offset: 2 GiB of copies
  // from a 1.2 MB file, unless the load's element budget stops them.
  {
    const uint64_t numel = 256 * 1024;
    const Zip z = make_zip({{"archive/data.pkl", rebuild_list(numel, 2000, [](size_t i) { return int32_t(i); },
                                                              {int32_t(numel - 2000)}, {1})},
                            {"archive/data/0", f32_storage(numel)}});
    refused_within(100 * MiB, [&] { load_torch(z.bytes); }, {"hostile.pt", "many tensors read the same storage"});
  }
  // Zero strides: each view of one float (a different one each time) expands to 2^24 floats (64 MiB).
  {
    const Zip z = make_zip(
        {{"archive/data.pkl", rebuild_list(100, 100, [](size_t i) { return int32_t(i); }, {4096, 4096}, {0, 0})},
         {"archive/data/0", f32_storage(100)}});
    refused_within(100 * MiB, [&] { load_torch(z.bytes); }, {"many tensors read the same storage"});
  }
  // The same view repeated (tied weights under many keys) is rebuilt once and shared.
  {
    const uint64_t numel = 256 * 1024;
    const Zip z =
        make_zip({{"archive/data.pkl", rebuild_list(numel, 2000, [](size_t) { return 0; }, {int32_t(numel)}, {1})},
                  {"archive/data/0", f32_storage(numel)}});
    const std::string path = tmp("tied.pt");
    write_file(path, z.bytes);
    alloc_counter::Scope scope;
    const auto root = mmgpt::load_torch_file(path);
    CHECK(scope.peak_bytes() < 16 * MiB);
    REQUIRE(root->items.size() == 2000);
    CHECK(root->items[0]->tensor == root->items[1999]->tensor);
  }
}

// ---- pickle -----------------------------------------------------------------------

TEST_CASE("pickle: declared lengths beyond the input are refused before allocating") {
  refused_within(MiB, [] { unpickle("\x80\x02X" + le(0x7fffffff, 4) + "abc."); },
                 {"hostile.pkl", "declared length 2147483647"});
  refused_within(MiB, [] { unpickle("\x80\x04\x8d" + le(uint64_t(1) << 60, 8) + "abc."); },
                 {"declared length 1152921504606846976"});
  refused_within(MiB,
                 [] {
                   unpickle(
                       "\x80\x03"
                       "B" +
                       le(0x7ffffff0, 4) + "abc.");
                 },
                 {"declared length"});
  refused_within(MiB, [] { unpickle("\x80\x04\x8e" + le(~uint64_t(0), 8) + "."); }, {"declared length"});
  refused_within(MiB, [] { unpickle("\x80\x02\x8b" + le(0x7fffffff, 4) + "."); }, {"declared length"});  // LONG4
  refused_within(MiB,
                 [] {
                   unpickle(
                       "\x80\x02"
                       "T" +
                       le(0x80000000u, 4) + ".");
                 },
                 {"negative length"});  // BINSTRING
  refused_within(MiB, [] { unpickle("\x80\x04\x95" + le(uint64_t(1) << 50, 8) + "N."); }, {"frame of"});
  // A LONG literal with a million digits, and LONG1 of 255 bytes.
  refused_within(4 * MiB, [] { unpickle("L" + std::string(1000000, '9') + "L\n."); }, {"not a 64-bit integer"});
  refused_within(MiB, [] { unpickle("\x80\x02\x8a\xff" + std::string(255, '\x7f') + "."); },
                 {"does not fit in 64 bits"});
}

TEST_CASE("pickle: memo abuse is refused") {
  refused_within(MiB, [] { unpickle("\x80\x02Nj\xff\xff\xff\xff."); }, {"memo index 4294967295 was never stored"});
  refused_within(MiB, [] { unpickle("Np-1\n."); }, {"negative memo index -1"});
  refused_within(MiB, [] { unpickle("Ng-5\n."); }, {"negative memo index -5"});
  refused_within(MiB, [] { unpickle("Np99999999999999999999\n."); }, {"not a 64-bit integer"});
  // Two million MEMOIZE opcodes (2 MB of input) would be two million memo entries.
  refused_within(128 * MiB, [] { unpickle("\x80\x04N" + std::string(2000000, '\x94') + "."); }, {"memo exceeds"});
  // LONG_BINPUT at scattered indices.
  std::string p = "\x80\x02N";
  for (uint32_t i = 0; i < 1100000; ++i) (p += 'r') += le(i * 3999u, 4);  // (not "r" + ...: GCC 12 -Wrestrict)
  refused_within(128 * MiB, [&] { unpickle(p + "."); }, {"memo exceeds"});
}

TEST_CASE("pickle: stack, mark and value floods are refused") {
  refused_within(256 * MiB, [] { unpickle("\x80\x02" + std::string(3000000, 'N') + "."); }, {"values"});
  refused_within(128 * MiB, [] { unpickle("\x80\x02N" + std::string(3000000, '2') + "."); }, {"stack exceeds"});
  refused_within(128 * MiB, [] { unpickle("\x80\x02" + std::string(3000000, '(') + "."); }, {"too many MARKs"});
  // One list appended to itself millions of times: no new values, only items.
  refused_within(256 * MiB,
                 [] {
                   unpickle("\x80\x02]" + [] {
                     std::string s;
                     for (int i = 0; i < 5000000; ++i) s += "2a";
                     return s;
                   }() + ".");
                 },
                 {"list, tuple and dict items"});
}

TEST_CASE("pickle: deep nesting is refused without recursing on the C++ stack") {
  // A million nested tuples (TUPLE1), lists (APPEND) and dicts: refused at STOP,
  // or when truncated, and freed without a recursive destructor.
  for (const bool stop : {true, false}) {
    CAPTURE(stop);
    const std::string end = stop ? "." : "";
    refused_within(256 * MiB, [&] { unpickle("\x80\x02N" + std::string(1000000, '\x85') + end); },
                   {stop ? "nested deeper than 512" : "without a STOP"});
    refused_within(256 * MiB,
                   [&] { unpickle("\x80\x02" + std::string(1000000, ']') + std::string(999999, 'a') + end); },
                   {stop ? "nested deeper than 512" : "without a STOP"});
    std::string nest = "\x80\x02";  // {None: {None: ... {None: None}}}
    for (int i = 0; i < 300000; ++i) nest += "(N";
    nest += "N";
    for (int i = 0; i < 300000; ++i) nest += "d";
    refused_within(256 * MiB, [&] { unpickle(nest + end); }, {stop ? "nested deeper than 512" : "without a STOP"});
  }
}

// ---- safetensors ----------------------------------------------------------------

TEST_CASE("safetensors: huge header lengths, tensors and offsets are refused") {
  refused_within(MiB,
                 [] {
                   const std::string path = tmp("hostile.safetensors");
                   write_file(path, le(uint64_t(1) << 62, 8) + "{}");
                   mmgpt::load_safetensors(path);
                 },
                 {"hostile.safetensors", "header length 4611686018427387904 exceeds"});
  refused_within(MiB,
                 [] {
                   const std::string path = tmp("hostile.safetensors");
                   write_file(path, le(50u << 20, 8) + "{}");
                   mmgpt::load_safetensors(path);
                 },
                 {"header length 52428800 exceeds the 2 bytes"});
  // 2^40 floats declared, 8 bytes present.
  refused_within(MiB,
                 [] {
                   load_safetensors(
                       "{\"t\":{\"dtype\":\"F32\",\"shape\":[1048576,1048576],\"data_offsets\":[0,4398046511104]}}",
                       std::string(8, '\0'));
                 },
                 {"'t'", "outside the 8 data bytes"});
  refused_within(MiB,
                 [] {
                   load_safetensors("{\"t\":{\"dtype\":\"F32\",\"shape\":[1048576,1048576],\"data_offsets\":[0,8]}}",
                                    std::string(8, '\0'));
                 },
                 {"'t'", "need 4398046511104"});
  // Offsets that wrap around 2^64.
  refused_within(MiB,
                 [] {
                   load_safetensors(
                       "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18446744073709551608,0]}}",
                       std::string(8, '\0'));
                 },
                 {"outside"});
  refused_within(MiB,
                 [] {
                   load_safetensors(
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                       std::string(8, '\0'));
                 },
                 {"overlap"});
}

TEST_CASE("safetensors: hostile header structure is refused while parsing") {
  // 10 MB of '[': a JSON document parser would build ten million nested arrays
  // (about 50 bytes each). The files are built outside the measured scope.
  const std::string path = tmp("hostile.safetensors");
  auto file = [&](const std::string& header) { write_file(path, le(header.size(), 8) + header); };
  auto load = [&] { mmgpt::load_safetensors(path); };
  file("{\"t\":{\"shape\":" + std::string(10000000, '['));
  refused_within(MiB, load, {"deeper than 3 levels"});
  file(std::string(10000000, '['));
  refused_within(MiB, load, {"not a JSON object"});
  file("{\"t\":" + std::string(10000000, '['));
  refused_within(MiB, load, {"'t' is not an object"});
  std::string h = "{\"__metadata__\":";
  for (int i = 0; i < 1000000; ++i) h += "{\"a\":";
  file(h);
  refused_within(MiB, load, {"deeper than 3"});
  // A shape of a million dims.
  h = "{\"t\":{\"dtype\":\"F32\",\"shape\":[1";
  for (int i = 0; i < 1000000; ++i) h += ",1";
  file(h + "],\"data_offsets\":[0,4]}}");
  refused_within(MiB, load, {"more than 64 values"});
  refused_within(MiB,
                 [] {
                   load_safetensors(
                       "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                       std::string(8, '\0'));
                 },
                 {"tensor 't' appears twice"});
  refused_within(MiB,
                 [] {
                   load_safetensors(
                       "{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                       std::string(4, '\0'));
                 },
                 {"gives 'dtype' twice"});
  refused_within(MiB, [] { load_safetensors("{\"t\":[1,2]}"); }, {"'t' is not an object"});
  refused_within(MiB,
                 [] {
                   load_safetensors("{\"t\":{\"dtype\":{\"x\":\"F32\"},\"shape\":[1],\"data_offsets\":[0,4]}}",
                                    std::string(4, '\0'));
                 },
                 {"no string 'dtype'"});
}

// ---- .mmgpt -------------------------------------------------------------------------

namespace {

using mmgpt::mmgpt_file::load_u32;
using mmgpt::mmgpt_file::load_u64;

std::string tiny_mmgpt() {
  mmgpt::ModelConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  c.n_ff = 32;
  c.n_ctx = 16;
  c.vocab_size = 4;
  std::vector<std::vector<float>> storage;
  std::vector<mmgpt::TensorToWrite> tensors;
  for (const mmgpt::TensorSpec& s : mmgpt::required_tensors(c)) {
    uint64_t n = 1;
    for (uint64_t d : s.shape) n *= d;
    storage.emplace_back(n, 0.5f);
    tensors.push_back({s.name, mmgpt::WeightType::F32, mmgpt::Layout::RowMajor, s.shape, storage.back().data(), n * 4, {}});
  }
  mmgpt::TokenizerData tok;
  tok.kind = mmgpt::TokenizerKind::Char;
  tok.tokens = {"a", "b", "c", "d"};
  const std::string path = tmp("tiny.mmgpt");
  mmgpt::write_model_file(path, c, tok, tensors);
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint64_t section(const std::string& img, uint32_t i) {  // offset of section i (config, tokenizer, tensors)
  const uint64_t table =
      load_u64(reinterpret_cast<const unsigned char*>(img.data()) + mmgpt::mmgpt_file::kOffSectionTable);
  return load_u64(reinterpret_cast<const unsigned char*>(img.data()) + table + 32 * i + 8);
}

void parse(const std::string& img) {
  mmgpt::parse_model_file_for_test(reinterpret_cast<const unsigned char*>(img.data()), img.size(), "hostile.mmgpt");
}

}  // namespace

TEST_CASE(".mmgpt: declared counts, strings and tensor sizes are bounded by the file") {
  const std::string good = tiny_mmgpt();
  parse(good);
  const uint64_t tok = section(good, 1), dir = section(good, 2);
  std::string b = good;
  put(b, tok + 16, uint64_t(1) << 40, 8);  // token_count
  refused_within(MiB, [&] { parse(b); }, {"hostile.mmgpt", "token_count 1099511627776"});
  b = good;
  put(b, tok + 24, uint64_t(1) << 40, 8);  // merge_count
  refused_within(MiB, [&] { parse(b); }, {"merge_count 1099511627776"});
  b = good;
  put(b, tok + 32, 0x7fffffff, 4);  // token 0's length
  refused_within(MiB, [&] { parse(b); }, {"token 0 length 2147483647 exceeds limit 4096"});
  b = good;
  put(b, dir, uint64_t(1) << 40, 8);  // tensor_count
  refused_within(MiB, [&] { parse(b); }, {"tensor_count 1099511627776"});
  b = good;
  put(b, dir + 8, 0xffffffff, 4);  // first tensor's name length
  refused_within(MiB, [&] { parse(b); }, {"name length 4294967295 is out of range"});
  // The first tensor's dims and nbytes claim 2^40 bytes.
  b = good;
  const uint32_t name_len = load_u32(reinterpret_cast<const unsigned char*>(b.data()) + dir + 8);
  const uint64_t dims = dir + 12 + name_len + 12;
  put(b, dims, uint64_t(1) << 38, 8);
  refused_within(MiB, [&] { parse(b); }, {"hostile.mmgpt"});
  const uint32_t ndim = load_u32(reinterpret_cast<const unsigned char*>(b.data()) + dir + 12 + name_len + 8);
  put(b, dims + 8 * ndim + 8, uint64_t(1) << 40, 8);  // nbytes
  refused_within(MiB, [&] { parse(b); }, {"hostile.mmgpt"});
  // A section table that claims a section ending past 2^64.
  b = good;
  const uint64_t table =
      load_u64(reinterpret_cast<const unsigned char*>(b.data()) + mmgpt::mmgpt_file::kOffSectionTable);
  put(b, table + 16, ~uint64_t(0) - 4, 8);
  refused_within(MiB, [&] { parse(b); }, {"exceeds file size"});
}
