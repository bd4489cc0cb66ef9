// .safetensors: values bit for bit against PyTorch, header order kept, and a
// rejection for every validation rule.
#include <doctest/doctest.h>

#include <cstring>

#include "formats/torch_checkpoint.hpp"
#include "formats_fixtures.hpp"

namespace {

const std::string& fx() { return fixtures::dir("formats_safetensors"); }

std::string file_with(const std::string& header, const std::string& data, uint64_t declared = UINT64_MAX) {
  const uint64_t n = declared == UINT64_MAX ? header.size() : declared;
  std::string b(8, '\0');
  std::memcpy(b.data(), &n, 8);
  return b + header + data;
}

void load_bytes(const std::string& bytes) {
  const std::string path = fx() + "/scratch.safetensors";
  fixtures::write_file(path, bytes);
  mmgpt::load_safetensors(path);
}

}  // namespace

TEST_CASE("safetensors values and order match what PyTorch wrote") {
  const std::string path = fx() + "/basic.safetensors";
  const auto tensors = mmgpt::load_safetensors(path);
  std::string dump;
  for (const auto& [name, t] : tensors) dump += name + " " + fixtures::canon(t) + "\n";
  CHECK(dump == fixtures::read_file(path + ".txt"));
  REQUIRE(tensors.size() == 5);
  CHECK(tensors[0].first == "b.weight");                      // header order, not sorted
  CHECK(tensors[1].second.values()[1] == std::ldexp(1.0f, -24));  // f16 subnormal
}

TEST_CASE("safetensors: a header with no tensors") {
  load_bytes(file_with("{\"__metadata__\":{\"a\":\"b\"}}", ""));
  load_bytes(file_with("{}", ""));
}

TEST_CASE("safetensors validation") {
  const std::string f32x2(8, '\0');
  const auto one = [](const std::string& fields) { return "{\"t\":{" + fields + "}}"; };
  fixtures::expect_error([] { load_bytes("1234"); }, {"scratch.safetensors", "8-byte"});
  fixtures::expect_error([&] { load_bytes(file_with("{}", "", 1ull << 62)); }, {"header length"});
  fixtures::expect_error([&] { load_bytes(file_with("{}", "", 1000)); }, {"header length 1000"});
  fixtures::expect_error([&] { load_bytes(file_with("{\"t\":", "")); }, {"not valid JSON"});
  fixtures::expect_error([&] { load_bytes(file_with("[1,2]", "")); }, {"not a JSON object"});
  fixtures::expect_error([&] { load_bytes(file_with("{\"t\":3}", "")); }, {"'t'", "not an object"});
  fixtures::expect_error([&] { load_bytes(file_with(one("\"shape\":[2],\"data_offsets\":[0,8]"), f32x2)); }, {"dtype"});
  fixtures::expect_error(
      [&] { load_bytes(file_with(one("\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,8]"), f32x2)); },
      {"F8_E4M3"});
  fixtures::expect_error([&] { load_bytes(file_with(one("\"dtype\":\"F32\",\"data_offsets\":[0,8]"), f32x2)); },
                         {"shape"});
  fixtures::expect_error(
      [&] { load_bytes(file_with(one("\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]"), f32x2)); }, {"shape"});
  fixtures::expect_error([&] { load_bytes(file_with(one("\"dtype\":\"F32\",\"shape\":[2]"), f32x2)); },
                         {"data_offsets"});
  fixtures::expect_error(
      [&] { load_bytes(file_with(one("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]"), f32x2)); },
      {"outside"});
  fixtures::expect_error(
      [&] { load_bytes(file_with(one("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]"), f32x2)); },
      {"outside"});
  fixtures::expect_error(
      [&] { load_bytes(file_with(one("\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]"), f32x2)); },
      {"need 12"});
  fixtures::expect_error(
      [&] {
        load_bytes(file_with(one("\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]"), f32x2));
      },
      {"'t'"});
  fixtures::expect_error(
      [&] {
        load_bytes(
            file_with("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
                      f32x2));
      },
      {"overlap"});
}

TEST_CASE("truncated and corrupted safetensors give mmgpt::Error, never a crash") {
  const std::string good = fixtures::read_file(fx() + "/basic.safetensors");
  for (size_t n = 0; n < good.size(); ++n) fixtures::expect_error([&] { load_bytes(good.substr(0, n)); }, {"scratch"});
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0xff);
    fixtures::ok_or_error([&] { load_bytes(bad); });
  }
}
