// torch.save files, zip (incl. zip64) and legacy, compared bit for bit with
// what PyTorch saved; refusal of compressed archives, hostile globals,
// big-endian files; truncation and corruption never crash.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>

#include "formats/torch_checkpoint.hpp"
#include "formats_fixtures.hpp"

using mmgpt::pickle::Value;
using K = Value::Kind;

namespace {

const std::string& fx() { return fixtures::dir("formats_torch"); }

uint32_t get32(const std::string& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
void put32(std::string& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void put16(std::string& b, size_t at, uint16_t v) { std::memcpy(b.data() + at, &v, 2); }

// Loads `bytes` through a scratch file.
void load_bytes(const std::string& bytes) {
  const std::string path = fx() + "/scratch.pt";
  fixtures::write_file(path, bytes);
  mmgpt::load_torch_file(path);
}

}  // namespace

TEST_CASE("torch.save files match what PyTorch wrote, bit for bit") {
  for (const char* name : {"tensors_zip.pt", "tensors_legacy.pt", "tensors_zip64.pt", "nanogpt_zip.pt",
                           "nanogpt_legacy.pt", "byteorder_little.pt"}) {
    CAPTURE(name);
    const std::string path = fx() + "/" + name;
    const auto v = mmgpt::load_torch_file(path);
    const std::string expected_file = std::string(name) == "byteorder_little.pt" ? "tensors_zip.pt" : name;
    CHECK(fixtures::canon(*v) == fixtures::read_file(fx() + "/" + expected_file + ".txt"));
  }
}

TEST_CASE("views, dtypes and tied weights") {
  const auto sd = mmgpt::load_torch_file(fx() + "/tensors_zip.pt");
  const Value* wte = sd->get("wte.weight");
  const Value* head = sd->get("lm_head.weight");
  REQUIRE((wte && head && wte->is_tensor() && head->is_tensor()));
  CHECK(wte->tensor->values() == head->tensor->values());
  CHECK(sd->get("f16")->tensor->source_dtype == "float16");
  CHECK(sd->get("bf16")->tensor->source_dtype == "bfloat16");
  CHECK(sd->get("transposed")->tensor->shape == std::vector<uint64_t>{5, 6});
  CHECK(sd->get("every_other")->tensor->values() == std::vector<float>{3, 5, 7, 9, 11, 13, 15, 17, 19});
  CHECK(sd->get("scalar")->tensor->shape.empty());
  CHECK(sd->get("scalar")->tensor->values() == std::vector<float>{3.5f});
  // f16 specials: -0, the smallest subnormal, 65504, +-inf
  const std::vector<float> h = sd->get("f16")->tensor->values();
  CHECK((std::signbit(h[0]) && h[0] == 0.0f));
  CHECK(h[1] == std::ldexp(1.0f, -24));
  CHECK(h[3] == 65504.0f);
  CHECK((std::isinf(h[4]) && h[4] > 0 && std::isinf(h[5]) && h[5] < 0));
}

TEST_CASE("nanoGPT-style checkpoint: model, model_args, optimizer, scalars") {
  for (const char* name : {"nanogpt_zip.pt", "nanogpt_legacy.pt"}) {
    CAPTURE(name);
    const auto ck = mmgpt::load_torch_file(fx() + "/" + name);
    REQUIRE(ck->get("model"));
    CHECK(ck->get("model")->get("_orig_mod.wte.weight")->tensor->shape == std::vector<uint64_t>{11, 8});
    CHECK(ck->get("model_args")->get("n_layer")->integer == 1);
    CHECK(ck->get("model_args")->get("bias")->kind == K::Bool);
    CHECK(ck->get("iter_num")->integer == 5);
    CHECK(ck->get("best_val_loss")->tensor->values() == std::vector<float>{1.25f});
    CHECK(ck->get("optimizer")->get("param_groups")->kind == K::List);
  }
}

TEST_CASE("refusals: compressed entries, hostile globals, big-endian, not a checkpoint") {
  fixtures::expect_error([] { mmgpt::load_torch_file(fx() + "/compressed.pt"); },
                         {"compressed.pt", "compressed", "uncompressed"});
  fixtures::expect_error([] { mmgpt::load_torch_file(fx() + "/evil_zip.pt"); }, {"posix.system", "evil_zip.pt"});
  CHECK_FALSE(std::filesystem::exists(fx() + "/MARKER"));
  fixtures::expect_error([] { mmgpt::load_torch_file(fx() + "/byteorder_big.pt"); }, {"byteorder", "big"});
  fixtures::expect_error([] { mmgpt::load_torch_file(fx() + "/meta.pkl"); }, {"not a torch.save"});
  fixtures::expect_error([] { load_bytes(""); }, {"not a torch.save"});
  fixtures::expect_error([] { mmgpt::load_torch_file(fx() + "/missing.pt"); }, {"missing.pt", "cannot open"});
  fixtures::expect_error([] { mmgpt::load_torch_file(fx()); }, {"not a regular file"});
}

TEST_CASE("bad zip offsets and sizes") {
  const std::string good = fixtures::read_file(fx() + "/tensors_zip.pt");
  const size_t eocd = good.rfind(std::string("PK\x05\x06", 4));
  REQUIRE(eocd != std::string::npos);
  const uint32_t cd = get32(good, eocd + 16);
  REQUIRE(get32(good, cd) == 0x02014b50);

  std::string b = good;
  put32(b, eocd + 16, 0x7fffffff);  // central directory offset
  fixtures::expect_error([&] { load_bytes(b); }, {"central directory"});
  b = good;
  put32(b, eocd + 12, 0xfffffff0);  // central directory size
  fixtures::expect_error([&] { load_bytes(b); }, {"central directory"});
  b = good;
  put16(b, eocd + 10, 0xfffe);  // entry count
  fixtures::expect_error([&] { load_bytes(b); }, {"entry count"});
  b = good;
  put32(b, cd + 42, 0x7ffffff0);  // first entry's local header offset
  fixtures::expect_error([&] { load_bytes(b); }, {"local header"});
  b = good;
  put32(b, cd + 20, 0x7ffffff0);  // first entry's sizes
  put32(b, cd + 24, 0x7ffffff0);
  fixtures::expect_error([&] { load_bytes(b); }, {"outside the file"});
  b = good;
  put16(b, cd + 10, 8);  // first entry claims deflate
  fixtures::expect_error([&] { load_bytes(b); }, {"compressed"});
  b = good;
  put16(b, cd + 28, 0xffff);  // name length past the directory
  fixtures::expect_error([&] { load_bytes(b); }, {"runs past"});
  b = good;
  put16(b, eocd + 20, 5);  // comment length inconsistent with the file
  fixtures::expect_error([&] { load_bytes(b); }, {"end-of-central-directory"});
}

TEST_CASE("truncated and corrupted checkpoints give mmgpt::Error, never a crash") {
  for (const char* name : {"tensors_zip.pt", "tensors_legacy.pt", "tensors_zip64.pt"}) {
    CAPTURE(name);
    const std::string good = fixtures::read_file(fx() + "/" + name);
    // Every length near the ends (headers, central directory), a sample between.
    for (size_t n = 0; n < good.size(); n += (n < 128 || n + 128 > good.size()) ? 1 : 11) {
      CAPTURE(n);
      fixtures::expect_error([&] { load_bytes(good.substr(0, n)); }, {"scratch.pt"});
    }
    for (size_t i = 0; i < good.size(); i += 5) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ 0xff);
      fixtures::ok_or_error([&] { load_bytes(bad); });
    }
  }
}
