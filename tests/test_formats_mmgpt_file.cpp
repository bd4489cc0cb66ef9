// .mmgpt writer + reader: round trips, one rejection test per validation rule
// of docs/format.md, and the writer's atomicity (no partial files, existing
// targets untouched).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "formats/error.hpp"
#include "formats/mmgpt_file.hpp"
#include "formats/mmgpt_file_bytes.hpp"
#include "formats/mmgpt_file_layout.hpp"
#include "formats/model_config.hpp"

namespace fs = std::filesystem;
using namespace mmgpt;
using mmgpt_file::load_u32;
using mmgpt_file::load_u64;
using mmgpt_file::store_u32;
using mmgpt_file::store_u64;
using Bytes = std::vector<unsigned char>;

namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.n_ff = 32;
  c.n_ctx = 16;
  c.vocab_size = 11;  // more rows than the char tokenizer has tokens (padded vocabulary)
  c.norm_eps = 1e-5f;
  c.gelu = GeluKind::Erf;
  return c;
}

TokenizerData char_tokenizer() {
  TokenizerData t;
  t.kind = TokenizerKind::Char;
  t.tokens = {"\n", " ", "a", "b", "\xc3\xa9" /* é */, "\xe2\x82\xac" /* € */, "\xf0\x9f\x98\x80" /* 😀 */,
              "z",  "!", "Q"};
  t.eos_id = -1;
  return t;
}

TokenizerData bpe_tokenizer() {
  TokenizerData t;
  t.kind = TokenizerKind::Gpt2Bpe;
  t.tokens = {"\xc4\xa0" /* Ġ */, "t", "h", "e", "th", "the", "\xc4\xa0the", "<|endoftext|>"};
  t.merges = {{"t", "h"}, {"th", "e"}, {"\xc4\xa0", "the"}};
  t.eos_id = 7;
  return t;
}

// A model whose tensors own their (deterministic, distinct) values.
struct Model {
  ModelConfig config;
  TokenizerData tokenizer;
  std::vector<std::vector<float>> storage;
  std::vector<TensorToWrite> tensors;
};

Model make_model(const ModelConfig& config, const TokenizerData& tokenizer) {
  Model m{config, tokenizer, {}, {}};
  const std::vector<TensorSpec> specs = required_tensors(config);
  m.storage.reserve(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    uint64_t n = 1;
    for (uint64_t d : specs[i].shape) n *= d;
    std::vector<float> v(n);
    for (uint64_t k = 0; k < n; ++k) v[k] = static_cast<float>(i) + static_cast<float>(k) * 0.001f;
    m.storage.push_back(std::move(v));
    m.tensors.push_back(
        {specs[i].name, WeightType::F32, Layout::RowMajor, specs[i].shape, m.storage.back().data(), n * sizeof(float), {}});
  }
  return m;
}

std::string test_dir(const std::string& name) {
  const fs::path dir = fs::path(MMGPT_TEST_TMP) / "formats_mmgpt_file" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void write(const std::string& path, const Model& m) { write_model_file(path, m.config, m.tokenizer, m.tensors); }

Bytes image_of(const Model& m) {
  static int counter = 0;
  const std::string dir = test_dir("image" + std::to_string(counter++));
  write(dir + "/m.mmgpt", m);
  return read_bytes(dir + "/m.mmgpt");
}

const Bytes& tiny_image() {
  static const Model m = make_model(tiny_config(), char_tokenizer());
  static const Bytes img = image_of(m);
  return img;
}

// The error message for an image, or "" if the reader accepts it.
std::string rejection(const Bytes& img, uint64_t size) {
  try {
    parse_model_file_for_test(img.data(), size, "model.mmgpt");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
std::string rejection(const Bytes& img) { return rejection(img, img.size()); }

#define CHECK_REJECTS(img, needle)                 \
  do {                                             \
    const std::string msg_ = rejection(img);       \
    INFO("message: " << msg_);                     \
    CHECK(msg_.rfind("model.mmgpt: ", 0) == 0);    \
    CHECK(msg_.find(needle) != std::string::npos); \
    CHECK(msg_.find('\n') == std::string::npos);   \
  } while (0)

// Section table entry i (the writer emits config, tokenizer, tensors in order).
uint64_t section_entry(const Bytes& img, uint32_t i) {
  return load_u64(img.data() + mmgpt_file::kOffSectionTable) + uint64_t(i) * mmgpt_file::kSectionEntrySize;
}
uint64_t section_offset(const Bytes& img, uint32_t i) { return load_u64(img.data() + section_entry(img, i) + 8); }
uint32_t section_count(const Bytes& img) { return load_u32(img.data() + mmgpt_file::kOffSectionCount); }

// Field positions of a tensor's directory entry, found by its length-prefixed name.
struct EntryPos {
  uint64_t dtype, layout, ndim, dims, offset, nbytes;
};
EntryPos entry_of(const Bytes& img, const std::string& name) {
  Bytes needle(4 + name.size());
  store_u32(needle.data(), static_cast<uint32_t>(name.size()));
  std::memcpy(needle.data() + 4, name.data(), name.size());
  const uint64_t dir = section_offset(img, 2);
  auto it = std::search(img.begin() + dir, img.end(), needle.begin(), needle.end());
  REQUIRE(it != img.end());
  const uint64_t p = static_cast<uint64_t>(it - img.begin()) + needle.size();
  const uint64_t ndim = load_u32(img.data() + p + 8);
  return {p, p + 4, p + 8, p + 12, p + 12 + 8 * ndim, p + 20 + 8 * ndim};
}

void set_u32(Bytes& img, uint64_t at, uint32_t v) { store_u32(img.data() + at, v); }
void set_u64(Bytes& img, uint64_t at, uint64_t v) { store_u64(img.data() + at, v); }

bool has_stray_files(const std::string& dir, const std::string& keep = "") {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string() != keep) return true;
  return false;
}

}  // namespace

// ---------------------------------------------------------------- config rules

TEST_CASE("required_tensors follows the documented names, shapes and flags") {
  ModelConfig c = tiny_config();
  std::vector<TensorSpec> all = required_tensors(c);
  CHECK(all.size() == 2 + 2 * 12 + 2);
  CHECK(all[0].name == "wte");
  CHECK(all[0].shape == std::vector<uint64_t>{11, 8});
  CHECK(all[1].name == "wpe");
  CHECK(all[1].shape == std::vector<uint64_t>{16, 8});
  const char* layer0[] = {"h.0.ln_1.weight",      "h.0.ln_1.bias",      "h.0.attn.qkv.weight", "h.0.attn.qkv.bias",
                          "h.0.attn.proj.weight", "h.0.attn.proj.bias", "h.0.ln_2.weight",     "h.0.ln_2.bias",
                          "h.0.mlp.fc.weight",    "h.0.mlp.fc.bias",    "h.0.mlp.proj.weight", "h.0.mlp.proj.bias"};
  for (int i = 0; i < 12; ++i) CHECK(all[2 + i].name == layer0[i]);
  CHECK(all[4].shape == std::vector<uint64_t>{24, 8});
  CHECK(all[5].shape == std::vector<uint64_t>{24});
  CHECK(all[10].shape == std::vector<uint64_t>{32, 8});
  CHECK(all[12].shape == std::vector<uint64_t>{8, 32});
  CHECK(all[13].shape == std::vector<uint64_t>{8});
  CHECK(all[14].name == "h.1.ln_1.weight");
  CHECK(all.back().name == "ln_f.bias");

  c.qkv_bias = c.linear_bias = c.norm_bias = false;
  c.tied_lm_head = false;
  all = required_tensors(c);
  CHECK(all.size() == 2 + 2 * 6 + 1 + 1);
  for (const TensorSpec& s : all) CHECK(s.name.find(".bias") == std::string::npos);
  CHECK(all.back().name == "lm_head.weight");
  CHECK(all.back().shape == std::vector<uint64_t>{11, 8});
}

TEST_CASE("validate_config refuses bad values, naming the source and field") {
  auto refusal = [](const ModelConfig& c) -> std::string {
    try {
      validate_config(c, "cfg.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(refusal(tiny_config()).empty());
  struct Case {
    void (*edit)(ModelConfig&);
    const char* needle;
  } cases[] = {
      {[](ModelConfig& c) { c.n_layer = 0; }, "n_layer"},
      {[](ModelConfig& c) { c.n_layer = 4097; }, "n_layer is 4097"},
      {[](ModelConfig& c) { c.n_head = 0; }, "n_head"},
      {[](ModelConfig& c) { c.n_embd = 0; }, "n_embd"},
      {[](ModelConfig& c) { c.n_embd = (1u << 20) + 2; }, "n_embd"},
      {[](ModelConfig& c) { c.n_ff = 0; }, "n_ff"},
      {[](ModelConfig& c) { c.n_ctx = 0; }, "n_ctx"},
      {[](ModelConfig& c) { c.n_ctx = (1u << 24) + 1; }, "n_ctx"},
      {[](ModelConfig& c) { c.vocab_size = 0; }, "vocab_size"},
      {[](ModelConfig& c) { c.vocab_size = (1u << 24) + 1; }, "vocab_size"},
      {[](ModelConfig& c) { c.n_head = 3; }, "not divisible by n_head 3"},
      {[](ModelConfig& c) { c.norm_eps = 0; }, "norm_eps"},
      {[](ModelConfig& c) { c.norm_eps = -1e-5f; }, "norm_eps"},
      {[](ModelConfig& c) { c.norm_eps = 1.0f; }, "norm_eps"},
      {[](ModelConfig& c) { c.norm_eps = std::numeric_limits<float>::quiet_NaN(); }, "norm_eps"},
      {[](ModelConfig& c) { c.norm_eps = std::numeric_limits<float>::infinity(); }, "norm_eps"},
      {[](ModelConfig& c) { c.gelu = static_cast<GeluKind>(7); }, "gelu has unknown id 7"},
      {[](ModelConfig& c) { c.pos_embedding = static_cast<PosEmbedding>(3); }, "pos_embedding has unknown id 3"},
      // The block's parts.
      {[](ModelConfig& c) { c.norm = static_cast<NormKind>(2); }, "norm has unknown id 2"},
      {[](ModelConfig& c) { c.norm = NormKind::RmsNorm; }, "RMS norm with a bias"},
      {[](ModelConfig& c) { c.norm_weight = false; }, "layer norm without a weight"},
      {[](ModelConfig& c) { c.n_kv_head = 3; }, "n_head 2 is not a multiple of n_kv_head 3"},
      {[](ModelConfig& c) { c.head_dim = 1u << 21; }, "n_kv_head or head_dim exceeds"},
      {[](ModelConfig& c) { c.pos_embedding = PosEmbedding::Rotary, c.rope_dims = 3; }, "rope_dims is 3"},
      {[](ModelConfig& c) { c.pos_embedding = PosEmbedding::Rotary, c.rope_dims = 6; }, "rope_dims is 6"},
      {[](ModelConfig& c) { c.rope_dims = 2; }, "positions are not rotary"},
      {[](ModelConfig& c) { c.pos_embedding = PosEmbedding::Rotary, c.rope_dims = 4, c.rope_theta = 0; }, "rope_theta"},
      {[](ModelConfig& c) { c.rope_scaling = static_cast<RopeScaling>(2); }, "rope_scaling has unknown id 2"},
      {[](ModelConfig& c) { c.rope_scaling = RopeScaling::Llama3; }, "llama3 rope scaling is inconsistent"},
      {[](ModelConfig& c) { c.qk_norm = static_cast<QkNorm>(3); }, "qk_norm has unknown id 3"},
      {[](ModelConfig& c) { c.qk_norm_scale = 0; }, "qk_norm_scale"},
      {[](ModelConfig& c) { c.attn_scale = -1; }, "attn_scale"},
      {[](ModelConfig& c) { c.logit_softcap = std::numeric_limits<float>::infinity(); }, "logit_softcap"},
  };
  for (const Case& k : cases) {
    ModelConfig c = tiny_config();
    k.edit(c);
    const std::string msg = refusal(c);
    INFO(msg);
    CHECK(msg.rfind("cfg.json: ", 0) == 0);
    CHECK(msg.find(k.needle) != std::string::npos);
  }
}

// ------------------------------------------------------------------ round trip

TEST_CASE("the block section: a modern config round-trips, GPT-2's block writes none, bad values are refused") {
  CHECK(section_count(tiny_image()) == 3);  // GPT-2's block: the file earlier versions wrote
  ModelConfig cfg = tiny_config();
  cfg.norm = NormKind::RmsNorm;
  cfg.norm_bias = false;
  cfg.n_kv_head = 1;
  cfg.head_dim = 6;
  cfg.mlp_bias = false;
  cfg.mlp_gated = true;
  cfg.gelu = GeluKind::Silu;
  cfg.parallel_residual = true;
  cfg.pos_embedding = PosEmbedding::Rotary;
  cfg.rope_dims = 4;
  cfg.rope_interleaved = true;
  cfg.rope_inverse = true;
  cfg.rope_theta = 500000.0;
  cfg.rope_scaling = RopeScaling::Llama3;
  cfg.rope_factor = 8, cfg.rope_low_freq_factor = 1, cfg.rope_high_freq_factor = 4, cfg.rope_original_ctx = 8192;
  cfg.qk_norm = QkNorm::Weighted;
  cfg.qk_norm_after_rope = true;
  cfg.qk_norm_scale = 1.2f;
  cfg.attn_scale = 0.25f;
  cfg.logit_softcap = 15.0f;
  const Model m = make_model(cfg, char_tokenizer());
  const Bytes img = image_of(m);
  REQUIRE(rejection(img).empty());
  CHECK(section_count(img) == 4);
  const ModelConfig c = parse_model_file_for_test(img.data(), img.size(), "model.mmgpt").config();
  CHECK(c.norm == NormKind::RmsNorm);
  CHECK(c.n_kv_head == 1);
  CHECK(c.head_dim == 6);
  CHECK(c.has_mlp_bias() == false);
  CHECK(c.linear_bias == true);
  CHECK(c.mlp_gated);
  CHECK(c.gelu == GeluKind::Silu);
  CHECK(c.parallel_residual);
  CHECK(c.pos_embedding == PosEmbedding::Rotary);
  CHECK(c.rope_dims == 4);
  CHECK(c.rope_interleaved);
  CHECK(c.rope_inverse);
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.rope_scaling == RopeScaling::Llama3);
  CHECK(c.rope_factor == 8.0f);
  CHECK(c.rope_high_freq_factor == 4.0f);
  CHECK(c.rope_original_ctx == 8192);
  CHECK(c.qk_norm == QkNorm::Weighted);
  CHECK(c.qk_norm_after_rope);
  CHECK(c.qk_norm_scale == 1.2f);
  CHECK(c.attn_scale == 0.25f);
  CHECK(c.logit_softcap == 15.0f);

  // The section is required (an older reader refuses the file), versioned and exact.
  const uint64_t entry = section_entry(img, 3), at = section_offset(img, 3);
  CHECK(load_u32(img.data() + entry) == mmgpt_file::kSectionBlock);
  CHECK(load_u32(img.data() + entry + 4) == mmgpt_file::kSectionFlagRequired);
  CHECK(load_u32(img.data() + at) == 1);  // no field of version 2 set: version 1, as earlier mmgpt wrote it
  Bytes bad = img;
  set_u32(bad, at, 3);
  CHECK_REJECTS(bad, "block config section: version 3 is not supported");
  bad = img;
  set_u32(bad, at, 2);
  CHECK_REJECTS(bad, "size is 80 (version 2 with 2 layers requires 120)");
  bad = img;
  set_u64(bad, entry + 16, mmgpt_file::kBlockSize - 8);
  CHECK_REJECTS(bad, "size is 72");
  bad = img;
  bad[at + 23] = 1;
  CHECK_REJECTS(bad, "reserved byte 23");
  bad = img;
  bad[at + 16] = 2;
  CHECK_REJECTS(bad, "field norm_weight is 2");
  bad = img;
  set_u32(bad, at + 8, 3);  // n_kv_head
  CHECK_REJECTS(bad, "not a multiple of n_kv_head 3");
  bad = img;
  set_u32(bad, at + 24, 5);  // rope_dims
  CHECK_REJECTS(bad, "rope_dims is 5");
  bad = img;
  set_u32(bad, at + 72, 1);
  CHECK_REJECTS(bad, "reserved bytes 72..79");
}

TEST_CASE("the block section, version 2 (nanochat): round-trips with its per-layer windows and value embeddings") {
  ModelConfig cfg = tiny_config();
  REQUIRE(cfg.n_layer == 2);
  cfg.norm = NormKind::RmsNorm;
  cfg.norm_weight = false;
  cfg.norm_bias = false;
  cfg.qkv_bias = cfg.linear_bias = false;
  cfg.tied_lm_head = false;
  cfg.gelu = GeluKind::ReluSquared;
  cfg.pos_embedding = PosEmbedding::Rotary;
  cfg.rope_dims = cfg.head_size();
  cfg.rope_inverse = true;
  cfg.qk_norm = QkNorm::Plain;
  cfg.qk_norm_after_rope = true;
  cfg.qk_norm_scale = 1.2f;
  cfg.logit_softcap = 15.0f;
  cfg.embed_norm = true;
  cfg.smear_channels = 4;
  cfg.resid_mix = true;
  cfg.backout_after = 2;
  cfg.ve_gate_channels = 3;
  cfg.ve_gate_range = 3.0f;
  cfg.attn_window = {5, 0};
  cfg.value_embed = {0, 1};
  const Model m = make_model(cfg, char_tokenizer());
  const Bytes img = image_of(m);
  REQUIRE(rejection(img).empty());
  const ModelFile f = parse_model_file_for_test(img.data(), img.size(), "model.mmgpt");
  const ModelConfig& c = f.config();
  CHECK(c.embed_norm);
  CHECK(c.smear_channels == 4);
  CHECK(c.resid_mix);
  CHECK(c.backout_after == 2);
  CHECK(c.ve_gate_channels == 3);
  CHECK(c.ve_gate_range == 3.0f);
  CHECK(c.attn_window == std::vector<uint32_t>{5, 0});
  CHECK(c.value_embed == std::vector<uint8_t>{0, 1});
  CHECK(c.gelu == GeluKind::ReluSquared);
  for (const char* name : {"smear.gate.weight", "smear.lambda", "resid_lambdas", "x0_lambdas", "backout_lambda",
                           "h.1.attn.ve.weight", "h.1.attn.ve_gate.weight"})
    CHECK(f.find(name) != nullptr);
  CHECK(f.find("h.0.attn.ve.weight") == nullptr);

  const uint64_t entry = section_entry(img, 3), at = section_offset(img, 3);
  CHECK(load_u32(img.data() + at) == 2);
  CHECK(load_u64(img.data() + entry + 16) == mmgpt_file::kBlockSize + mmgpt_file::kBlockV2Extra + 2 * 8);
  Bytes bad = img;
  set_u32(bad, at + 80 + 24 + 8 + 4, 2);  // layer 1's flags
  CHECK_REJECTS(bad, "layer 1 has unknown flags 2");
  bad = img;
  set_u32(bad, at + 80 + 12, 0);  // ve_gate_channels, with a layer that has a value embedding
  CHECK_REJECTS(bad, "value embeddings need both");
  bad = img;
  set_u32(bad, at + 80 + 8, 3);  // backout_after > n_layer
  CHECK_REJECTS(bad, "backout_after is 3");
  bad = img;
  bad[at + 82] = 1;
  CHECK_REJECTS(bad, "reserved bytes 82..83");
}

TEST_CASE("round trip through a file: config, char tokenizer, tensor bytes, mapping") {
  ModelConfig cfg = tiny_config();
  cfg.tied_lm_head = false;
  cfg.qkv_bias = false;
  cfg.norm_eps = 3e-6f;
  cfg.gelu = GeluKind::Tanh;
  cfg.vocab_size = 4096;
  cfg.n_embd = 64;  // wte and lm_head: 4096 * 64 * 4 = 1 MiB: large, page-aligned
  cfg.n_head = 4;
  const Model m = make_model(cfg, char_tokenizer());
  const std::string dir = test_dir("roundtrip");
  const std::string path = dir + "/model.mmgpt";
  write(path, m);
  CHECK_FALSE(has_stray_files(dir, "model.mmgpt"));

  const ModelFile f = ModelFile::open(path);
  CHECK(f.path() == path);
  CHECK(f.version() == kFormatVersion);
  CHECK(f.file_size() == fs::file_size(path));
  const ModelConfig& c = f.config();
  CHECK(c.n_layer == cfg.n_layer);
  CHECK(c.n_head == cfg.n_head);
  CHECK(c.n_embd == cfg.n_embd);
  CHECK(c.n_ff == cfg.n_ff);
  CHECK(c.n_ctx == cfg.n_ctx);
  CHECK(c.vocab_size == cfg.vocab_size);
  CHECK(c.norm_eps == cfg.norm_eps);
  CHECK(c.qkv_bias == false);
  CHECK(c.linear_bias == true);
  CHECK(c.norm_bias == true);
  CHECK(c.tied_lm_head == false);
  CHECK(c.gelu == GeluKind::Tanh);
  CHECK(c.pos_embedding == PosEmbedding::Learned);
  CHECK(f.tokenizer().kind == TokenizerKind::Char);
  CHECK(f.tokenizer().tokens == m.tokenizer.tokens);
  CHECK(f.tokenizer().tokens[6] == "\xf0\x9f\x98\x80");
  CHECK(f.tokenizer().merges.empty());
  CHECK(f.tokenizer().eos_id == -1);

  // The mapping of this file in our address space, from /proc/self/maps.
  const std::string real = fs::canonical(path).string();
  uintptr_t map_lo = 0, map_hi = 0;
  {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      if (line.size() < real.size() || line.compare(line.size() - real.size(), real.size(), real) != 0) continue;
      std::istringstream ls(line);
      char dash;
      ls >> std::hex >> map_lo >> dash >> map_hi;
    }
  }
  REQUIRE(map_hi > map_lo);

  REQUIRE(f.tensors().size() == m.tensors.size());
  bool saw_large = false;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorView& t = f.tensors()[i];
    CAPTURE(t.name);
    CHECK(t.name == m.tensors[i].name);
    CHECK(t.shape == m.tensors[i].shape);
    CHECK(t.dtype == WeightType::F32);
    CHECK(t.layout == Layout::RowMajor);
    CHECK(t.nbytes == m.tensors[i].nbytes);
    CHECK(t.numel() * 4 == t.nbytes);
    CHECK(t.offset % 64 == 0);
    if (t.nbytes >= (1u << 20)) {
      saw_large = true;
      CHECK(t.offset % 4096 == 0);
      CHECK(reinterpret_cast<uintptr_t>(t.data) % 4096 == 0);
    }
    // Points into the read-only mapping, at its offset: not a copy.
    const auto addr = reinterpret_cast<uintptr_t>(t.data);
    CHECK(addr >= map_lo);
    CHECK(addr + t.nbytes <= map_hi);
    CHECK(addr - reinterpret_cast<uintptr_t>(f.tensors()[0].data) == t.offset - f.tensors()[0].offset);
    CHECK(std::memcmp(t.data, m.tensors[i].data, t.nbytes) == 0);
    CHECK(&f.tensor(t.name) == &t);
  }
  CHECK(saw_large);
  CHECK(f.find("no.such") == nullptr);
  CHECK_THROWS_WITH_AS(f.tensor("no.such"), (path + ": no tensor named 'no.such'").c_str(), Error);
  CHECK(f.tensor("lm_head.weight").f32()[1] == m.storage.back()[1]);
}

TEST_CASE("round trip in memory: BPE tokenizer with merges; data points into the image") {
  const Model m = make_model(tiny_config(), bpe_tokenizer());
  const Bytes img = image_of(m);
  const ModelFile f = parse_model_file_for_test(img.data(), img.size(), "mem.mmgpt");
  CHECK(f.tokenizer().kind == TokenizerKind::Gpt2Bpe);
  CHECK(f.tokenizer().tokens == m.tokenizer.tokens);
  CHECK(f.tokenizer().merges == m.tokenizer.merges);
  CHECK(f.tokenizer().eos_id == 7);
  for (const TensorView& t : f.tensors()) CHECK(t.data == img.data() + t.offset);
}

TEST_CASE("the tokenizer section is read in place; its owned copy is built on first use") {
  const Model m = make_model(tiny_config(), bpe_tokenizer());
  const Bytes img = image_of(m);
  const ModelFile f = parse_model_file_for_test(img.data(), img.size(), "mem.mmgpt");
  const StoredTokenizer& st = f.stored_tokenizer();
  CHECK(st.kind == TokenizerKind::Gpt2Bpe);
  CHECK(st.eos_id == 7);
  REQUIRE(st.tokens.size() == m.tokenizer.tokens.size());
  for (size_t i = 0; i < st.tokens.size(); ++i) {
    CHECK(st.tokens[i] == m.tokenizer.tokens[i]);
    CHECK((st.tokens[i].data() >= reinterpret_cast<const char*>(img.data()) &&
           st.tokens[i].data() < reinterpret_cast<const char*>(img.data() + img.size())));
  }
  REQUIRE(st.merges.size() == m.tokenizer.merges.size());
  CHECK(st.merges[2].first == m.tokenizer.merges[2].first);
  CHECK(st.merges[2].second == m.tokenizer.merges[2].second);
  // Built once, from any number of threads at once: every caller sees the same object.
  std::vector<const TokenizerData*> seen(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) threads.emplace_back([&, i] { seen[i] = &f.tokenizer(); });
  for (std::thread& t : threads) t.join();
  for (const TokenizerData* d : seen) CHECK(d == seen[0]);
  CHECK(seen[0]->tokens == m.tokenizer.tokens);
}

TEST_CASE("a tensor written through produce() in pieces gives the bytes its data gives; a wrong count writes nothing") {
  const std::string dir = test_dir("writer_produce");
  const Model m = make_model(tiny_config(), char_tokenizer());
  const std::string direct = dir + "/direct.mmgpt", streamed = dir + "/streamed.mmgpt";
  write(direct, m);
  Model p = m;
  for (TensorToWrite& t : p.tensors) {
    const auto* bytes = static_cast<const unsigned char*>(t.data);
    const uint64_t n = t.nbytes;
    t.data = nullptr;
    t.produce = [bytes, n](const TensorToWrite::Put& put) {
      for (uint64_t at = 0; at < n; at += 7) put(bytes + at, std::min<uint64_t>(7, n - at));
    };
  }
  write(streamed, p);
  CHECK(read_bytes(streamed) == read_bytes(direct));
  std::filesystem::remove(direct);

  const Bytes before = read_bytes(streamed);
  for (const int64_t delta : {-1, 1}) {
    CAPTURE(delta);
    Model bad = p;
    const uint64_t n = bad.tensors[1].nbytes;
    const std::vector<unsigned char> data(n + 1, 0x5a);
    bad.tensors[1].produce = [&data, n, delta](const TensorToWrite::Put& put) { put(data.data(), n + delta); };
    std::string what;
    try {
      write(streamed, bad);
    } catch (const Error& e) {
      what = e.what();
    }
    CHECK(what.find("tensor 'wpe'") != std::string::npos);
    CHECK(what.find(streamed) != std::string::npos);
    CHECK(read_bytes(streamed) == before);
    CHECK_FALSE(has_stray_files(dir, "streamed.mmgpt"));
  }
  // An error thrown while producing (a value that cannot be stored) leaves the old file too.
  Model failing = p;
  failing.tensors[2].produce = [](const TensorToWrite::Put&) { throw Error("tensor 'x': cannot be stored"); };
  CHECK_THROWS_AS(write(streamed, failing), Error);
  CHECK(read_bytes(streamed) == before);
  CHECK_FALSE(has_stray_files(dir, "streamed.mmgpt"));
}

TEST_CASE("the writer is deterministic and pads with zeros") {
  const Model m = make_model(tiny_config(), char_tokenizer());
  const Bytes a = image_of(m), b = image_of(m);
  CHECK(a == b);
  const ModelFile f = parse_model_file_for_test(a.data(), a.size(), "m");
  // Every byte not claimed by a tensor after the first tensor's start is padding: zero.
  std::vector<bool> claimed(a.size(), false);
  for (const TensorView& t : f.tensors())
    for (uint64_t k = 0; k < t.nbytes; ++k) claimed[t.offset + k] = true;
  for (uint64_t k = f.tensors()[0].offset; k < a.size(); ++k)
    if (!claimed[k]) CHECK(a[k] == 0);
  // The header's reserved bytes too.
  for (uint64_t k = 40; k < 64; ++k) CHECK(a[k] == 0);
}

TEST_CASE("ModelFile moves keep the mapping alive") {
  const std::string dir = test_dir("move");
  const Model m = make_model(tiny_config(), char_tokenizer());
  write(dir + "/m.mmgpt", m);
  ModelFile a = ModelFile::open(dir + "/m.mmgpt");
  const void* data = a.tensor("wte").data;
  ModelFile b(std::move(a));
  CHECK(b.tensor("wte").data == data);
  ModelFile c = ModelFile::open(dir + "/m.mmgpt");
  c = std::move(b);
  CHECK(c.tensor("wte").data == data);
  CHECK(std::memcmp(c.tensor("wte").data, m.tensors[0].data, m.tensors[0].nbytes) == 0);
}

// -------------------------------------------------------- open(): file system

TEST_CASE("open refuses missing files, directories, empty files and FIFOs clearly") {
  const std::string dir = test_dir("open");
  CHECK_THROWS_WITH_AS(ModelFile::open(dir + "/absent.mmgpt"),
                       doctest::Contains((dir + "/absent.mmgpt: cannot open model file").c_str()), Error);
  CHECK_THROWS_WITH_AS(ModelFile::open(dir), (dir + ": is a directory, not a .mmgpt file").c_str(), Error);
  std::ofstream(dir + "/empty.mmgpt").close();
  CHECK_THROWS_WITH_AS(ModelFile::open(dir + "/empty.mmgpt"), doctest::Contains("file is empty (0 bytes)"), Error);
  REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(ModelFile::open(dir + "/fifo"), doctest::Contains("is not a regular file"), Error);
  std::ofstream(dir + "/junk.mmgpt") << "hello, this is not a model at all; it is long enough to have a header.....";
  CHECK_THROWS_WITH_AS(ModelFile::open(dir + "/junk.mmgpt"), doctest::Contains("not a .mmgpt file (bad magic"), Error);
}

// --------------------------------------------------------------- header rules

TEST_CASE("truncation at every header/metadata length and through the data is refused") {
  const Bytes& img = tiny_image();
  REQUIRE(rejection(img).empty());
  const ModelFile f = parse_model_file_for_test(img.data(), img.size(), "m");
  const uint64_t data_start = f.tensors()[0].offset;
  for (uint64_t len = 0; len <= data_start; ++len) {
    CAPTURE(len);
    const std::string msg = rejection(img, len);
    CHECK(msg.rfind("model.mmgpt: ", 0) == 0);
  }
  for (uint64_t len = data_start; len < img.size(); len += 37) CHECK_FALSE(rejection(img, len).empty());
  CHECK(rejection(img, img.size() - 1)
            .find("header field file_size is " + std::to_string(img.size()) + " but the file is " +
                  std::to_string(img.size() - 1)) != std::string::npos);
  CHECK(rejection(img, 40).find("smaller than the 64-byte header") != std::string::npos);
}

TEST_CASE("bad magic, version, byte-order mark, file size and header size are refused") {
  Bytes img = tiny_image();
  img[0] = 'X';
  CHECK_REJECTS(img, "bad magic");
  img = tiny_image();
  img[5] = '\n';  // CR LF converted to LF
  CHECK_REJECTS(img, "bad magic");
  img = tiny_image();
  set_u32(img, 8, 0);
  CHECK_REJECTS(img, "format version 0 is not supported");
  set_u32(img, 8, kFormatVersion + 1);
  CHECK_REJECTS(img, "format version " + std::to_string(kFormatVersion + 1) + " is not supported");
  img = tiny_image();
  img[12] = 1, img[13] = 2, img[14] = 3, img[15] = 4;  // what a big-endian writer would produce
  CHECK_REJECTS(img, "byte-order mark is 0x04030201");
  img = tiny_image();
  img.push_back(0);  // appended garbage
  CHECK_REJECTS(img, "header field file_size");
  img = tiny_image();
  set_u32(img, 16, 32);
  CHECK_REJECTS(img, "header_size is 32");
  set_u32(img, 16, 0xFFFFFFFF);
  CHECK_REJECTS(img, "header_size is 4294967295");
}

TEST_CASE("section table rules") {
  Bytes img = tiny_image();
  set_u32(img, 20, 0);
  CHECK_REJECTS(img, "section_count is 0");
  set_u32(img, 20, 65);
  CHECK_REJECTS(img, "section_count is 65");
  img = tiny_image();
  set_u64(img, 24, img.size() - 16);
  CHECK_REJECTS(img, "section table: offset");
  set_u64(img, 24, 16);
  CHECK_REJECTS(img, "points inside the header");
  img = tiny_image();
  set_u64(img, 24, std::numeric_limits<uint64_t>::max() - 8);  // offset + size wraps
  CHECK_REJECTS(img, "exceeds file size");

  // Section bounds: size past the end, offset + size wrapping around.
  img = tiny_image();
  set_u64(img, section_entry(img, 1) + 16, img.size());
  CHECK_REJECTS(img, "section 1 (kind 2): offset");
  set_u64(img, section_entry(img, 1) + 8, std::numeric_limits<uint64_t>::max());
  set_u64(img, section_entry(img, 1) + 16, 2);
  CHECK_REJECTS(img, "exceeds file size");
  // Duplicate and missing kinds.
  img = tiny_image();
  set_u32(img, section_entry(img, 1), mmgpt_file::kSectionConfig);
  CHECK_REJECTS(img, "section kind 1 appears more than once");
  img = tiny_image();
  set_u32(img, section_entry(img, 2), 99);  // optional unknown: skipped, so the directory is missing
  set_u32(img, section_entry(img, 2) + 4, 0);
  CHECK_REJECTS(img, "missing tensor directory section");
  // Sections may not overlap each other.
  img = tiny_image();
  set_u64(img, section_entry(img, 1) + 8, section_offset(img, 0));
  CHECK_REJECTS(img, "overlaps");
}

TEST_CASE("unknown sections: optional ones are skipped, required ones refused") {
  // Move the section table to the end of the file with a fourth entry
  // pointing at 16 extra bytes, as a later writer might.
  const Bytes& base = tiny_image();
  Bytes img = base;
  const uint64_t old_table = load_u64(base.data() + 24);
  const uint64_t new_table = img.size();
  img.insert(img.end(), base.begin() + old_table, base.begin() + old_table + 3 * 32);
  const uint64_t extra = img.size() + 32;
  Bytes entry(32, 0);
  store_u32(entry.data(), 99);
  store_u64(entry.data() + 8, extra);
  store_u64(entry.data() + 16, 16);
  img.insert(img.end(), entry.begin(), entry.end());
  img.insert(img.end(), 16, 0xAB);
  set_u32(img, 20, 4);
  set_u64(img, 24, new_table);
  set_u64(img, 32, img.size());
  CHECK(rejection(img).empty());
  set_u32(img, new_table + 3 * 32 + 4, mmgpt_file::kSectionFlagRequired);
  CHECK_REJECTS(img, "unknown section kind 99 is marked required");
  set_u32(img, new_table + 3 * 32 + 4, 0);
  set_u64(img, new_table + 3 * 32 + 16, 17);  // even skipped sections must lie inside the file
  CHECK_REJECTS(img, "exceeds file size");
}

// --------------------------------------------------------------- config rules

TEST_CASE("config section values are validated") {
  const uint64_t cfg = section_offset(tiny_image(), 0);
  struct Case {
    uint64_t at;
    int width;  // 1 or 4 bytes
    uint32_t value;
    const char* needle;
  } cases[] = {
      {0, 4, 0, "config field n_layer is 0"},
      {0, 4, 5000, "n_layer is 5000"},
      {4, 4, 3, "n_embd 8 is not divisible by n_head 3"},
      {8, 4, 0, "n_embd is 0"},
      {12, 4, 0, "n_ff is 0"},
      {16, 4, 0, "n_ctx is 0"},
      {20, 4, 1u << 25, "vocab_size is 33554432"},
      {24, 4, 0x7FC00000u, "norm_eps"},  // NaN
      {24, 4, 0x7F800000u, "norm_eps"},  // +inf
      {24, 4, 0, "norm_eps"},
      {24, 4, 0x3F800000u, "norm_eps"},  // 1.0
      {28, 4, 4, "gelu has unknown id 4"},
      {32, 4, 2, "pos_embedding has unknown id 2"},
      {32, 4, 1, "rope_dims is 0"},  // rotary, but no block section says how
      {36, 1, 2, "field qkv_bias is 2"},
      {37, 1, 255, "field linear_bias is 255"},
      {38, 1, 7, "field norm_bias is 7"},
      {39, 1, 2, "field tied_lm_head is 2"},
  };
  for (const Case& k : cases) {
    Bytes img = tiny_image();
    if (k.width == 4)
      set_u32(img, cfg + k.at, k.value);
    else
      img[cfg + k.at] = static_cast<unsigned char>(k.value);
    CHECK_REJECTS(img, k.needle);
  }
  Bytes img = tiny_image();
  set_u64(img, section_entry(img, 0) + 16, 39);
  CHECK_REJECTS(img, "config section size is 39");
}

// ------------------------------------------------------------ tokenizer rules

TEST_CASE("tokenizer section values are validated") {
  const Bytes& base = tiny_image();  // char tokenizer, 10 tokens, vocab 11
  const uint64_t tok = section_offset(base, 1);
  Bytes img = base;
  set_u32(img, tok, 9);
  CHECK_REJECTS(img, "tokenizer kind has unknown id 9");
  img = base;
  set_u64(img, tok + 8, 10);
  CHECK_REJECTS(img, "eos_id 10 is out of range");
  set_u64(img, tok + 8, static_cast<uint64_t>(-2));
  CHECK_REJECTS(img, "eos_id -2 is out of range");
  img = base;
  set_u64(img, tok + 16, 12);
  CHECK_REJECTS(img, "token_count 12 exceeds config vocab_size 11");
  img = base;
  set_u64(img, tok + 16, 11);  // one more token than the section holds
  CHECK_REJECTS(img, "tokenizer section: token 10 length");
  img = base;
  set_u64(img, tok + 24, uint64_t(1) << 60);  // hostile count: refused before any allocation
  CHECK_REJECTS(img, "merge_count 1152921504606846976 cannot fit");
  img = base;
  set_u64(img, tok + 16, 0);
  CHECK_REJECTS(img, "tokenizer section:");  // tokens left over as trailing bytes
  img = base;
  set_u32(img, tok + 32, 5000);  // first token's length
  CHECK_REJECTS(img, "token 0 length 5000 exceeds limit 4096");
  img = base;
  set_u32(img, tok + 32, 4000);  // within the limit, past the section's end: named too
  CHECK_REJECTS(img, "tokenizer section: token 0 at offset");
  img = base;
  set_u32(img, tok + 32, 0);
  CHECK_REJECTS(img, "token");
  img = base;
  img[tok + 32 + 4] = 0xFF;  // first token "\n" -> invalid UTF-8
  CHECK_REJECTS(img, "tokenizer token 0 is not valid UTF-8");
  img = base;
  set_u32(img, tok, 0);  // kind none with tokens
  CHECK_REJECTS(img, "token_count is 10 (must be 0)");
  img = base;
  set_u64(img, section_entry(img, 1) + 16, load_u64(img.data() + section_entry(img, 1) + 16) - 1);
  CHECK_REJECTS(img, "remain in the section");

  // Merges are only for BPE.
  const Bytes bpe = image_of(make_model(tiny_config(), bpe_tokenizer()));
  REQUIRE(rejection(bpe).empty());
  img = bpe;
  set_u32(img, section_offset(img, 1), static_cast<uint32_t>(TokenizerKind::Char));
  CHECK_REJECTS(img, "merges are only allowed for gpt2-bpe");
}

TEST_CASE("every token is checked as UTF-8 on its own, around tokens of 0x80 bytes or more too") {
  // The reader checks runs of tokens as one range of the section: a long
  // token's length, whose low byte need not be ASCII, must not complete a
  // character that the token before it leaves unfinished.
  TokenizerData t = char_tokenizer();
  t.tokens[2] = "a\xe2\x96\x81";                          // "a▁", before a token of 0x81 bytes
  t.tokens[3] = std::string(0x81, 'x');                   // its length's low byte: a continuation byte
  t.tokens[5] = std::string(0xC0, 'y') + "\xe2\x82\xac";  // its length's low byte, 0xC3: a lead byte
  const Bytes lead = image_of(make_model(tiny_config(), t));
  REQUIRE(rejection(lead).empty());
  const ModelFile f = parse_model_file_for_test(lead.data(), lead.size(), "model.mmgpt");
  REQUIRE(f.stored_tokenizer().tokens.size() == t.tokens.size());
  for (size_t i = 0; i < t.tokens.size(); ++i) CHECK(f.stored_tokenizer().tokens[i] == t.tokens[i]);

  t.tokens[5] = std::string(0x102, 'y') + "\xe2\x82\xac";  // length 0x105: all its bytes ASCII
  const Bytes good = image_of(make_model(tiny_config(), t));
  REQUIRE(rejection(good).empty());
  // Where token i's bytes start in the image.
  auto token_at = [&good](size_t i) {
    uint64_t at = section_offset(good, 1) + 32;
    for (size_t k = 0; k < i; ++k) at += 4 + load_u32(good.data() + at);
    return at + 4;
  };
  Bytes img = good;
  // "aa\xe2\x96": unfinished, though the next token's length (0x81, 0, 0, 0) would finish it
  img[token_at(2) + 1] = 'a', img[token_at(2) + 2] = 0xe2, img[token_at(2) + 3] = 0x96;
  CHECK_REJECTS(img, "tokenizer token 2 is not valid UTF-8");
  img = good;
  img[token_at(3) + 0x80] = 0xc3;  // the long token ends unfinished, before a short one's length
  CHECK_REJECTS(img, "tokenizer token 3 is not valid UTF-8");
  img = good;
  img[token_at(4) + 0] = 0x80;  // "\x80" after the long token's end
  CHECK_REJECTS(img, "tokenizer token 4 is not valid UTF-8");
  img = good;
  img[token_at(5) + 0x104] = 0x41;  // "yy...\xe2\x82A": a long token, unfinished
  CHECK_REJECTS(img, "tokenizer token 5 is not valid UTF-8");
  img = good;
  img[token_at(9)] = 0xf4;  // the last token, unfinished at the section's end
  CHECK_REJECTS(img, "tokenizer token 9 is not valid UTF-8");
}

TEST_CASE("the tokenizer tables section: written for BPE, searched in place, every field checked, optional") {
  const Bytes bpe = image_of(make_model(tiny_config(), bpe_tokenizer()));
  const ModelFile f = parse_model_file_for_test(bpe.data(), bpe.size(), "m");
  REQUIRE(f.bpe_tables() != nullptr);
  const mmgpt::StoredBpeTables& t = *f.bpe_tables();
  CHECK(t.token_count == 8);
  CHECK(t.token_bytes(0) == " ");  // "Ġ" is the space byte
  CHECK(t.token_bytes(6) == " the");
  CHECK(t.token_bytes(7) == "<|endoftext|>");
  CHECK(t.table.byte_id[int('t')] == 1);
  CHECK(t.table.byte_id[int(' ')] == 0);
  CHECK(t.table.find(1, 2).id == 4);  // t + h -> th, rank 0
  CHECK(t.table.find(1, 2).rank == 0);
  CHECK(t.table.find(0, 5).id == 6);  // Ġ + the -> Ġthe, rank 2
  CHECK(reinterpret_cast<const unsigned char*>(t.table.keys.data()) > bpe.data());  // in the image, not a copy
  CHECK(reinterpret_cast<const unsigned char*>(t.table.keys.data()) < bpe.data() + bpe.size());

  const Bytes& chars = tiny_image();  // a character vocabulary has no tables
  CHECK(parse_model_file_for_test(chars.data(), chars.size(), "m").bpe_tables() == nullptr);
  CHECK(load_u32(chars.data() + mmgpt_file::kOffSectionCount) == 3);

  REQUIRE(load_u32(bpe.data() + section_entry(bpe, 3)) == mmgpt_file::kSectionTokenizerTables);
  CHECK(load_u32(bpe.data() + section_entry(bpe, 3) + 4) == 0);  // not required
  const uint64_t at = section_offset(bpe, 3), size_at = section_entry(bpe, 3) + 16;
  const uint64_t cap = load_u64(bpe.data() + at + mmgpt_file::kTablesOffCapacity);
  CHECK(cap == 16);
  Bytes img = bpe;
  set_u32(img, at, 2);
  CHECK_REJECTS(img, "tokenizer tables section: table kind 2 is not 1 (1 = GPT-2 BPE, 2 = tokenizer.json BPE)");
  img = bpe;
  set_u64(img, at + mmgpt_file::kTablesOffTokenCount, 9);
  CHECK_REJECTS(img, "token_count 9 differs from the tokenizer's 8");
  img = bpe;
  set_u64(img, at + mmgpt_file::kTablesOffCapacity, 24);
  CHECK_REJECTS(img, "capacity 24 is not a power of two from 16 to 2^26");
  img = bpe;
  set_u64(img, at + mmgpt_file::kTablesOffCapacity, 1024);
  CHECK_REJECTS(img, "cannot hold the tables");
  img = bpe;
  set_u32(img, at + mmgpt_file::kTablesOffByteIds + 4 * 't', 8);
  CHECK_REJECTS(img, "the token of byte 116 is 8");
  const uint64_t keys = at + mmgpt_file::kTablesOffKeys, offsets = keys + 16 * cap;
  img = bpe;
  for (uint64_t h = 0; h < cap; ++h)  // the first stored pair gets an id past the vocabulary
    if (load_u64(img.data() + keys + 8 * h) != mmgpt::kBpeEmptyKey) {
      set_u64(img, keys + 8 * h, mmgpt::bpe_pair_key(1, 8));
      break;
    }
  CHECK_REJECTS(img, "holds the ids 1, 8");
  img = bpe;
  set_u64(img, offsets + 8, 1000);
  CHECK_REJECTS(img, "the bytes of token 0 end at 1000");
  img = bpe;
  set_u64(img, offsets, 1);
  CHECK_REJECTS(img, "the first token's bytes do not start at 0");
  img = bpe;
  set_u64(img, size_at, load_u64(img.data() + size_at) - 1);
  CHECK_REJECTS(img, "the bytes of token 7 end at");

  // A merge rule naming a string that is not a token: no tables are written
  // (the file converts as before; loading it names the rule).
  TokenizerData odd = bpe_tokenizer();
  odd.merges.push_back({"e", "t"});
  const Bytes no_tables = image_of(make_model(tiny_config(), odd));
  CHECK(load_u32(no_tables.data() + mmgpt_file::kOffSectionCount) == 3);
  CHECK(parse_model_file_for_test(no_tables.data(), no_tables.size(), "m").bpe_tables() == nullptr);

  // Not required: under a kind this reader does not know it is skipped, and
  // the tokenizer's strings are all there is (as for an older file).
  img = bpe;
  set_u32(img, section_entry(img, 3), 99);
  const ModelFile older = parse_model_file_for_test(img.data(), img.size(), "m");
  CHECK(older.bpe_tables() == nullptr);
  CHECK(older.tokenizer().merges == bpe_tokenizer().merges);
}

// --------------------------------------------------------------- tensor rules

TEST_CASE("tensor directory entries are validated") {
  const Bytes& base = tiny_image();
  const ModelFile f = parse_model_file_for_test(base.data(), base.size(), "m");
  const TensorView& ln_w = f.tensor("h.0.ln_1.weight");
  const TensorView& ln_b = f.tensor("h.0.ln_1.bias");
  Bytes img;

  img = base;
  const uint64_t past_end = (base.size() + 63) / 64 * 64;
  set_u64(img, entry_of(img, "wte").offset, past_end);
  CHECK_REJECTS(img, "tensor 'wte': offset " + std::to_string(past_end) + " + size 352 exceeds file size " +
                         std::to_string(base.size()));
  img = base;
  set_u64(img, entry_of(img, "wte").offset, std::numeric_limits<uint64_t>::max() - 63);  // 64-aligned, wraps
  CHECK_REJECTS(img, "exceeds file size");
  img = base;
  set_u64(img, entry_of(img, "wte").offset, f.tensor("wte").offset + 4);
  CHECK_REJECTS(img, "tensor 'wte': offset " + std::to_string(f.tensor("wte").offset + 4) + " is not a multiple of 64");
  img = base;
  set_u64(img, entry_of(img, "h.0.ln_1.bias").offset, ln_w.offset);
  CHECK_REJECTS(img, "overlaps tensor 'h.0.ln_1.weight'");
  img = base;
  set_u64(img, entry_of(img, "h.0.ln_1.bias").offset, 0);
  CHECK_REJECTS(img, "overlaps");  // a tensor over the header
  img = base;
  set_u64(img, entry_of(img, "h.0.ln_1.bias").offset, section_offset(img, 2) / 64 * 64);
  CHECK_REJECTS(img, "overlaps");  // a tensor over the directory itself
  img = base;
  {
    const EntryPos e = entry_of(img, "wte");  // [11, 8] -> [2^33, 2^33]
    set_u64(img, e.dims, uint64_t(1) << 33);
    set_u64(img, e.dims + 8, uint64_t(1) << 33);
    CHECK_REJECTS(img, "tensor 'wte': shape [8589934592, 8589934592] overflows a 64-bit byte count");
  }
  img = base;
  set_u64(img, entry_of(img, "wte").nbytes, 348);
  CHECK_REJECTS(img, "tensor 'wte': nbytes 348 does not match shape [11, 8] in layout row-major (expected 352)");
  img = base;
  set_u32(img, entry_of(img, "wte").dtype, 5);
  CHECK_REJECTS(img, "tensor 'wte': unknown dtype id 5");
  img = base;
  set_u32(img, entry_of(img, "wte").layout, 4);
  CHECK_REJECTS(
      img,
      "tensor 'wte': unknown layout id 4 (this reader knows 0 = row-major, 1 = panel16, 2 = panel16q, 3 = panel16x2");
  img = base;
  set_u32(img, entry_of(img, "wte").ndim, 9);
  CHECK_REJECTS(img, "tensor 'wte': ndim 9 exceeds limit 8");
  img = base;
  set_u32(img, entry_of(img, "wte").ndim, 3);  // reads past the entry: nbytes mismatch or section overrun
  CHECK_FALSE(rejection(img).empty());
  img = base;
  set_u32(img, entry_of(img, "wte").dtype - 4 - 3, 0);  // name length 0
  CHECK_REJECTS(img, "entry 0 name length 0 is out of range");
  img = base;
  set_u32(img, entry_of(img, "wpe").dtype - 4 - 3, 300);
  CHECK_REJECTS(img, "entry 1 name length 300 is out of range");
  img = base;
  img[entry_of(img, "wte").dtype - 1] = ' ';  // "wt "
  CHECK_REJECTS(img, "tensor name contains byte 32");
  img = base;
  set_u64(img, section_offset(img, 2), uint64_t(1) << 62);  // hostile tensor_count
  CHECK_REJECTS(img, "tensor_count 4611686018427387904 cannot fit");
  (void)ln_b;
}

TEST_CASE("the tensor set must match the config exactly") {
  const Bytes& base = tiny_image();
  Bytes img = base;
  // Duplicate: rename h.0.ln_2.weight to h.0.ln_1.weight (same length, same shape).
  img[entry_of(img, "h.0.ln_2.weight").dtype - 8] = '1';
  CHECK_REJECTS(img, "tensor 'h.0.ln_1.weight' appears more than once");
  img = base;
  img[entry_of(img, "ln_f.bias").dtype - 1] = 'x';  // ln_f.biax
  CHECK_REJECTS(img, "missing tensor 'ln_f.bias' (shape [8]) required by the config");
  img = base;
  {
    const EntryPos e = entry_of(img, "wte");  // [11, 8] -> [8, 11]: same size, wrong shape
    set_u64(img, e.dims, 8);
    set_u64(img, e.dims + 8, 11);
  }
  CHECK_REJECTS(img, "tensor 'wte' has shape [8, 11] but the config requires [11, 8]");
  img = base;
  img[section_offset(img, 0) + 38] = 0;  // norm_bias off: layer-norm biases become extras
  CHECK_REJECTS(img, "unexpected tensor 'h.0.ln_1.bias' (not required by the config)");
  img = base;
  set_u32(img, section_offset(img, 0) + 16, 17);  // n_ctx 17: wpe shape no longer matches
  CHECK_REJECTS(img, "tensor 'wpe' has shape [16, 8] but the config requires [17, 8]");
}

TEST_CASE("large tensors must be page-aligned") {
  ModelConfig cfg = tiny_config();
  cfg.vocab_size = 4096;
  cfg.n_embd = 64;  // wte is exactly 1 MiB
  cfg.n_layer = 1;
  const Bytes img = image_of(make_model(cfg, char_tokenizer()));
  const ModelFile f = parse_model_file_for_test(img.data(), img.size(), "m");
  const uint64_t off = f.tensor("wte").offset;
  CHECK(off % 4096 == 0);
  Bytes bad = img;
  set_u64(bad, entry_of(bad, "wte").offset, off + 64);
  CHECK_REJECTS(bad, "tensor 'wte': offset " + std::to_string(off + 64) + " is not a multiple of 4096");
}

TEST_CASE("random corruption of the metadata never crashes the reader") {
  const Bytes& base = tiny_image();
  const ModelFile f = parse_model_file_for_test(base.data(), base.size(), "m");
  const uint64_t meta_end = f.tensors()[0].offset;
  std::mt19937_64 rng(12345);
  int refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes img = base;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) img[rng() % meta_end] = static_cast<unsigned char>(rng());
    try {
      parse_model_file_for_test(img.data(), img.size(), "model.mmgpt");
    } catch (const Error& e) {
      ++refused;
      CHECK(std::string(e.what()).rfind("model.mmgpt: ", 0) == 0);
    }
  }
  MESSAGE("corrupted images refused: " << refused << " of 3000");
  CHECK(refused > 0);
}

// --------------------------------------------------------------------- writer

TEST_CASE("the writer refuses invalid models and leaves no file") {
  const std::string dir = test_dir("writer_refuses");
  const std::string path = dir + "/m.mmgpt";
  auto refusal = [&](const Model& m) -> std::string {
    try {
      write(path, m);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const Model good = make_model(tiny_config(), char_tokenizer());
  struct Case {
    void (*edit)(Model&);
    const char* needle;
  } cases[] = {
      {[](Model& m) { m.config.n_head = 3; }, "not divisible by n_head"},
      {[](Model& m) { m.tensors.pop_back(); }, "missing tensor 'ln_f.bias'"},
      {[](Model& m) { m.tensors.push_back(m.tensors.back()); }, "'ln_f.bias' appears more than once"},
      {[](Model& m) { m.tensors[0].name = "token_embedding"; }, "missing tensor 'wte'"},
      {[](Model& m) { m.tensors[1].data = nullptr; }, "tensor 'wpe': data is null"},
      {[](Model& m) { m.tensors[1].nbytes -= 4; }, "tensor 'wpe': nbytes"},
      {[](Model& m) {
         m.tensors[1].shape = {8, 16};
       },
       "tensor 'wpe' has shape [8, 16]"},
      {[](Model& m) { m.tensors[1].dtype = static_cast<WeightType>(9); }, "unknown dtype id 9"},
      {[](Model& m) { m.tensors[1].layout = static_cast<Layout>(9); }, "unknown layout id 9"},
      {[](Model& m) { m.config.norm_bias = false; }, "unexpected tensor 'h.0.ln_1.bias'"},
      {[](Model& m) { m.tokenizer.tokens.push_back(""); }, "tokenizer token 10 is empty"},
      {[](Model& m) { m.tokenizer.tokens.push_back(std::string(5000, 'a')); }, "is 5000 bytes (limit 4096)"},
      {[](Model& m) { m.tokenizer.tokens.push_back("\xc3"); }, "not valid UTF-8"},
      {[](Model& m) { m.tokenizer.tokens.resize(12, "x"); }, "token_count 12 exceeds config vocab_size 11"},
      {[](Model& m) {
         m.tokenizer.merges.push_back({"a", "b"});
       },
       "merges are only allowed for gpt2-bpe"},
      {[](Model& m) { m.tokenizer.eos_id = 10; }, "eos_id 10 is out of range"},
      {[](Model& m) { m.tokenizer.kind = TokenizerKind::Gpt2Bpe, m.tokenizer.tokens.clear(); }, "token_count is 0"},
  };
  for (const Case& k : cases) {
    Model m = good;
    k.edit(m);
    const std::string msg = refusal(m);
    INFO(msg);
    CHECK(msg.rfind(path + ": ", 0) == 0);
    CHECK(msg.find(k.needle) != std::string::npos);
    CHECK_FALSE(has_stray_files(dir));
  }
}

TEST_CASE("a failed write leaves an existing target untouched and no temporary") {
  const std::string dir = test_dir("writer_atomic");
  const std::string path = dir + "/m.mmgpt";
  const Model small = make_model(tiny_config(), char_tokenizer());
  write(path, small);
  const Bytes before = read_bytes(path);

  // Invalid input: refused before anything is created.
  Model bad = small;
  bad.tensors[3].data = nullptr;
  CHECK_THROWS_AS(write(path, bad), Error);
  CHECK(read_bytes(path) == before);
  CHECK_FALSE(has_stray_files(dir, "m.mmgpt"));

  // A full disk: a child process limited to 2 KiB files, with SIGXFSZ ignored
  // so write() fails with EFBIG instead of killing it.
  ModelConfig big_cfg = tiny_config();
  big_cfg.n_layer = 3;
  const Model big = make_model(big_cfg, char_tokenizer());
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{2048, 2048};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int code = 1;  // 1: the write succeeded, which it must not
    try {
      write(path, big);
    } catch (const Error& e) {
      const std::string msg = e.what();
      code = msg.rfind(path + ": cannot write the new file", 0) == 0 && msg.find("File too large") != std::string::npos
                 ? 0
                 : 2;
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(read_bytes(path) == before);
  CHECK_FALSE(has_stray_files(dir, "m.mmgpt"));

  // A successful write replaces the target.
  write(path, big);
  CHECK(read_bytes(path) != before);
  CHECK(ModelFile::open(path).config().n_layer == 3);
  CHECK_FALSE(has_stray_files(dir, "m.mmgpt"));
}

TEST_CASE("the writer reports a missing output directory or a directory target") {
  const std::string dir = test_dir("writer_paths");
  const Model m = make_model(tiny_config(), char_tokenizer());
  CHECK_THROWS_WITH_AS(write(dir + "/no/such/dir/m.mmgpt", m),
                       doctest::Contains(("output directory '" + dir + "/no/such/dir' does not exist").c_str()), Error);
  fs::create_directory(dir + "/sub");
  CHECK_THROWS_WITH_AS(write(dir + "/sub", m), doctest::Contains("output path is a directory"), Error);
  CHECK_THROWS_WITH_AS(write(dir + "/", m), doctest::Contains("output path names a directory"), Error);
  CHECK(fs::is_empty(dir + "/sub"));
}

// ---------------------------------------------------------------- panel16 layout

TEST_CASE("panel16 matrices: round trip, and the layout's own rules") {
  ModelConfig cfg = tiny_config();
  cfg.tied_lm_head = false;
  Model m = make_model(cfg, char_tokenizer());
  // Pack every matrix as docs/format.md says: panels of 16 rows, k-major, zero-padded.
  std::vector<std::vector<float>> packed;
  packed.reserve(m.tensors.size());
  const std::vector<TensorSpec> specs = required_tensors(cfg);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!specs[i].matrix) continue;
    const uint64_t n = specs[i].shape[0], k = specs[i].shape[1], panels = (n + 15) / 16;
    std::vector<float> p(panels * 16 * k, 0.0f);
    for (uint64_t r = 0; r < n; ++r)
      for (uint64_t c = 0; c < k; ++c) p[(r / 16) * 16 * k + c * 16 + r % 16] = m.storage[i][r * k + c];
    packed.push_back(std::move(p));
    m.tensors[i].layout = Layout::Panel16;
    m.tensors[i].data = packed.back().data();
    m.tensors[i].nbytes = packed.back().size() * sizeof(float);
  }
  const std::string dir = test_dir("panel16");
  write(dir + "/model.mmgpt", m);
  const ModelFile f = ModelFile::open(dir + "/model.mmgpt");
  for (const TensorSpec& s : specs) {
    CAPTURE(s.name);
    const TensorView& t = f.tensor(s.name);
    CHECK(t.layout == (s.matrix ? Layout::Panel16 : Layout::RowMajor));
  }
  const TensorView& wte = f.tensor("wte");  // [11, 8]: one panel, 5 padding rows
  CHECK(wte.nbytes == 16 * 8 * 4);
  CHECK(wte.f32()[3 * 16 + 2] == m.storage[0][2 * 8 + 3]);  // W[2][3]
  CHECK(wte.f32()[3 * 16 + 12] == 0.0f);                    // padding row 12

  // A vector in panel16 is refused by the writer and the reader.
  Model bad = make_model(cfg, char_tokenizer());
  for (TensorToWrite& t : bad.tensors)
    if (t.name == "h.0.ln_1.weight") t.layout = Layout::Panel16;
  CHECK_THROWS_WITH_AS(
      write(dir + "/bad.mmgpt", bad),
      doctest::Contains("tensor 'h.0.ln_1.weight': layout panel16 needs a matrix, but the shape is [8]"), mmgpt::Error);
  const Bytes& base = tiny_image();
  Bytes img = base;
  set_u32(img, entry_of(img, "h.0.ln_1.weight").layout, 1);
  CHECK_REJECTS(img, "tensor 'h.0.ln_1.weight': layout panel16 needs a matrix, but the shape is [8]");
  // Flipping a row-major matrix to panel16 changes its expected size.
  img = base;
  set_u32(img, entry_of(img, "wte").layout, 1);
  CHECK_REJECTS(img, "tensor 'wte': nbytes 352 does not match shape [11, 8] in layout panel16 (expected 512)");
  // wpe [16, 8] has the same size in both layouts, but it is a table, not a matmul weight.
  img = base;
  set_u32(img, entry_of(img, "wpe").layout, 1);
  CHECK_REJECTS(img, "tensor 'wpe' has layout panel16, which only the weight matrices of the matmuls may have");
}

TEST_CASE("bf16 / f16 matrices: round trip, 2 bytes per element in panel16, nowhere else") {
  ModelConfig cfg = tiny_config();
  cfg.tied_lm_head = false;
  Model m = make_model(cfg, char_tokenizer());
  // Every matrix as 16-bit panels (the element values do not matter to the format);
  // lm_head.weight in f16, the others in bf16.
  std::vector<std::vector<uint16_t>> packed;
  packed.reserve(m.tensors.size());
  const std::vector<TensorSpec> specs = required_tensors(cfg);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!specs[i].matrix) continue;
    const uint64_t n = specs[i].shape[0], k = specs[i].shape[1], panels = (n + 15) / 16;
    std::vector<uint16_t> p(panels * 16 * k, 0);
    for (uint64_t r = 0; r < n; ++r)
      for (uint64_t c = 0; c < k; ++c) p[(r / 16) * 16 * k + c * 16 + r % 16] = uint16_t(1000 * i + r * k + c);
    packed.push_back(std::move(p));
    m.tensors[i].layout = Layout::Panel16;
    m.tensors[i].dtype = specs[i].name == "lm_head.weight" ? WeightType::F16 : WeightType::BF16;
    m.tensors[i].data = packed.back().data();
    m.tensors[i].nbytes = packed.back().size() * sizeof(uint16_t);
  }
  const std::string dir = test_dir("half");
  write(dir + "/model.mmgpt", m);
  const ModelFile f = ModelFile::open(dir + "/model.mmgpt");
  for (const TensorSpec& s : specs) {
    CAPTURE(s.name);
    const TensorView& t = f.tensor(s.name);
    CHECK(t.dtype == (!s.matrix ? WeightType::F32 : s.name == "lm_head.weight" ? WeightType::F16 : WeightType::BF16));
  }
  const TensorView& wte = f.tensor("wte");  // [11, 8]: one panel of 16 x 8 two-byte elements
  CHECK(wte.nbytes == 16 * 8 * 2);
  CHECK(wte.u16()[3 * 16 + 2] == uint16_t(2 * 8 + 3));  // W[2][3] of tensor 0
  CHECK(wte.u16()[3 * 16 + 12] == 0);                   // padding row 12
  CHECK(f.tensor("lm_head.weight").nbytes == 16 * 8 * 2);

  // The writer refuses a 16-bit dtype outside panel16 (stored as panel16x2), and on a tensor that is not a matrix.
  Model bad = make_model(cfg, char_tokenizer());
  bad.tensors[0].dtype = WeightType::BF16;  // wte, row-major
  bad.tensors[0].nbytes /= 2;
  CHECK_THROWS_WITH_AS(
      write(dir + "/bad.mmgpt", bad),
      doctest::Contains("tensor 'wte': dtype bf16 is only allowed in layout panel16x2 (this tensor is row-major)"),
      mmgpt::Error);
  // wpe [16, 8] in panel16 f16: right size, but not a matmul weight.
  bad = make_model(cfg, char_tokenizer());
  std::vector<uint16_t> wpe16(16 * 8, 0);
  bad.tensors[1].dtype = WeightType::F16;
  bad.tensors[1].layout = Layout::Panel16;
  bad.tensors[1].data = wpe16.data();
  bad.tensors[1].nbytes = wpe16.size() * 2;
  CHECK_THROWS_WITH_AS(write(dir + "/bad.mmgpt", bad),
                       doctest::Contains("tensor 'wpe' has dtype f16, which only the weight matrices"), mmgpt::Error);

  // The reader: each dtype only in its own layout, with its own byte count;
  // a vector may not hold a reduced dtype.
  const Bytes& base = tiny_image();
  Bytes img = base;
  set_u32(img, entry_of(img, "h.0.ln_1.weight").dtype, 1);
  CHECK_REJECTS(img,
                "tensor 'h.0.ln_1.weight': dtype bf16 is only allowed in layout panel16x2 (this tensor is row-major)");
  img = base;
  set_u32(img, entry_of(img, "h.0.ln_1.weight").dtype, 4);
  CHECK_REJECTS(img, "tensor 'h.0.ln_1.weight': dtype q4_0 is only allowed in layout panel16q");
  // wte [11, 8] (352 bytes as f32) with these dtype and layout ids.
  const std::string old16 =
      " in layout panel16 is the panel order of files written by mmgpt before layout 3 (2026-11-24)";
  const std::string oldq = " in layout panel16 is the block order of files written by mmgpt before 2026-11-24";
  const struct {
    uint32_t dtype, layout;
    std::string why;
  } wte_cases[] = {
      {2, 0, "dtype f16 is only allowed in layout panel16x2 (this tensor is row-major)"},
      {3, 0, "dtype q8_0 is only allowed in layout panel16q (this tensor is row-major)"},
      // The byte counts: one panel of 16 x 8 two-byte elements; one panel of
      // one q8_0 / q4_0 unit: two blocks of 512 or 256 bytes of quants (the
      // second one empty here) and a line of scales.
      {2, 3, "nbytes 352 does not match shape [11, 8] in layout panel16x2 (expected 256)"},
      {3, 2, "nbytes 352 does not match shape [11, 8] in layout panel16q (expected 1088)"},
      {4, 2, "nbytes 352 does not match shape [11, 8] in layout panel16q (expected 576)"},
      // Files written before layouts 2 and 3 kept 16-bit and quantized panels
      // in layout 1 in another order: refused, not misread.
      {1, 1, "dtype bf16" + old16},
      {2, 1, "dtype f16" + old16},
      {3, 1, "dtype q8_0" + oldq},
      {4, 1, "dtype q4_0" + oldq},
      // Layouts 2 and 3 hold only their own dtypes.
      {0, 2, "layout panel16q is only for dtypes q8_0 and q4_0"},
      {1, 2, "layout panel16q is only for dtypes q8_0 and q4_0"},
      {2, 2, "layout panel16q is only for dtypes q8_0 and q4_0"},
      {0, 3, "layout panel16x2 is only for dtypes bf16 and f16"},
      {3, 3, "layout panel16x2 is only for dtypes bf16 and f16"},
      {4, 3, "layout panel16x2 is only for dtypes bf16 and f16"},
  };
  for (const auto& c : wte_cases) {
    CAPTURE(c.dtype);
    CAPTURE(c.layout);
    img = base;
    set_u32(img, entry_of(img, "wte").dtype, c.dtype);
    set_u32(img, entry_of(img, "wte").layout, c.layout);
    CHECK_REJECTS(img, "tensor 'wte': " + c.why);
  }
  img = base;
  set_u32(img, entry_of(img, "wte").dtype, 5);
  CHECK_REJECTS(img,
                "tensor 'wte': unknown dtype id 5 (this reader knows 0 = f32, 1 = bf16, 2 = f16, 3 = q8_0, 4 = q4_0");
}
