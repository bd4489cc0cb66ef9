// Hostile tokenizer files (vocab.json, merges.txt): refused with a clear
// error while what the reader allocates stays within a small multiple of the
// file, measured by counting every operator new (tests/alloc_counter.hpp).
#include "alloc_counter.hpp"
#include "bounds_testing.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "formats/error.hpp"
#include "text/tokenizer_files.hpp"

namespace {

using bounds_testing::MiB;
using bounds_testing::refused_within;

std::string dir() {
  const std::string d = std::string(MMGPT_TEST_TMP) + "/convert_bounds";
  std::filesystem::create_directories(d);
  return d;
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

}  // namespace

TEST_CASE("vocab.json: nesting, wrong shapes and oversized files are refused early") {
  const std::string v = dir() + "/vocab.json", m = dir() + "/merges.txt";
  write(m, "a b\n");
  // 20 MB of '[': a JSON document parser would build twenty million nested arrays (gigabytes).
  write(v, std::string(20'000'000, '['));
  refused_within(48 * MiB, [&] { mmgpt::read_bpe_files(v, m); }, {"vocab.json", "not a JSON object"});
  write(v, "{\"a\":" + std::string(20'000'000, '['));
  refused_within(48 * MiB, [&] { mmgpt::read_bpe_files(v, m); }, {"the id of token \"a\" is not an integer"});
  write(v, "{\"a\":0,\"a\":1}");
  refused_within(MiB, [&] { mmgpt::read_bpe_files(v, m); }, {"token \"a\" appears twice"});
  // A sparse 1 GB file is refused by its size, before it is read.
  {
    std::ofstream(v, std::ios::trunc).close();
    std::filesystem::resize_file(v, uint64_t(1) << 30);
    refused_within(MiB, [&] { mmgpt::read_bpe_files(v, m); }, {"vocab.json", "1073741824 bytes, more than"});
  }
}

TEST_CASE("merges.txt: blank-line floods cost no memory per line") {
  const std::string v = dir() + "/vocab.json", m = dir() + "/merges.txt";
  write(v, "{\"a\":0,\"b\":1,\"ab\":2}");
  // 30 MB of blank lines and then a merge: the old reader kept every line (about 1 GB).
  write(m, std::string(30'000'000, '\n') + "a b\n");
  refused_within(64 * MiB, [&] { mmgpt::read_bpe_files(v, m); }, {"merges.txt", "line 1 is not a merge"});
  // Trailing blank lines are still fine.
  write(m, "#version: 0.2\na b\n" + std::string(1000, '\n'));
  CHECK(mmgpt::read_bpe_files(v, m).merges.size() == 1);
}
