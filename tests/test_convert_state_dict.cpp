// The converter's bookkeeping on hand-made state dicts: layer counting on
// hostile keys, prefix stripping, the tensor taker's refusals, container
// sniffing, the tensor rearrangements and layout detection.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "formats/error.hpp"
#include "tools/convert/checkpoint_loader.hpp"
#include "tools/convert/layout.hpp"
#include "tools/convert/tensor_ops.hpp"

namespace fs = std::filesystem;
using namespace mmgpt;
using namespace mmgpt::convert;

namespace {

TensorPtr tensor(std::vector<uint64_t> shape, float start = 0) {
  auto t = std::make_shared<mmgpt::HostTensor>();
  t->shape = std::move(shape);
  t->data.resize(t->numel());
  for (size_t i = 0; i < t->data.size(); ++i) t->data[i] = start + float(i);
  t->source_dtype = "float32";
  return t;
}

StateDict dict(const std::vector<std::string>& names) {
  StateDict sd;
  for (const auto& n : names) sd.entries.emplace_back(n, tensor({2}));
  return sd;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const mmgpt::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("count_layers") {
  CHECK(count_layers(dict({"h.0.a", "h.1.a", "h.1.b", "x", "h.2.c"}), "h.", "f") == 3);
  CHECK(count_layers(dict({"t.h.10.a", "t.h.9.a", "t.h.8.a", "t.h.7.a", "t.h.6.a", "t.h.5.a", "t.h.4.a", "t.h.3.a",
                           "t.h.2.a", "t.h.1.a", "t.h.0.a"}),
                     "t.h.", "f") == 11);
  CHECK(error_of([] {
          count_layers(dict({"h.0.a", "h.2.a"}), "h.", "f.pt");
        }).find("layer 1 is missing") != std::string::npos);
  CHECK(error_of([] { count_layers(dict({"h.1.a"}), "h.", "f.pt"); }).find("layer 0") != std::string::npos);
  CHECK(error_of([] { count_layers(dict({"x"}), "h.", "f.pt"); }).find("no layer tensors") != std::string::npos);
  for (const char* hostile : {"h.01.a", "h.x.a", "h.99999999999999999999.a", "h.0", "h.-1.a", "h..a", "h.1000000.a"})
    CHECK_MESSAGE(error_of([&] {
                    count_layers(dict({"h.0.a", hostile}), "h.", "f.pt");
                  }).find(hostile) != std::string::npos,
                  hostile);
}

TEST_CASE("wrapper prefixes") {
  StateDict sd = dict({"_orig_mod.a", "module.b", "module._orig_mod.c", "d"});
  strip_wrapper_prefixes(sd, "f.pt");
  CHECK(sd.entries[0].first == "a");
  CHECK(sd.entries[1].first == "b");
  CHECK(sd.entries[2].first == "c");
  CHECK(sd.entries[3].first == "d");
  StateDict dup = dict({"_orig_mod.a", "a"});
  CHECK(error_of([&] { strip_wrapper_prefixes(dup, "f.pt"); }).find("duplicates") != std::string::npos);
}

TEST_CASE("TensorTaker refusals") {
  StateDict sd = dict({"a", "b", "buffer", "stray"});
  TensorTaker taker(sd, "ck.pt", "nanogpt");
  CHECK(error_of([&] {
          taker.require({"a", "x", "y"});
        }) == "ck.pt: not a complete nanogpt checkpoint: missing 2 tensor(s): x, y");
  CHECK(error_of([&] { taker.take("a", {3}); }).find("'a' has shape [2], layout nanogpt expects [3]") !=
        std::string::npos);
  CHECK(taker.take("a", {2}) != nullptr);
  taker.take("b", {2});
  taker.ignore("buffer");
  taker.ignore("absent-buffer");
  CHECK(error_of([&] { taker.finish(); }).find("unknown to layout nanogpt") != std::string::npos);
  CHECK(error_of([&] { taker.finish(); }).find("stray") != std::string::npos);
  taker.ignore("stray");
  CHECK_NOTHROW(taker.finish());
}

TEST_CASE("tensor rearrangements") {
  const TensorPtr m = tensor({2, 3});  // 0 1 2 / 3 4 5
  const TensorPtr t = transpose2d(m);
  CHECK(t->shape == std::vector<uint64_t>{3, 2});
  CHECK(t->values() == std::vector<float>{0, 3, 1, 4, 2, 5});
  std::vector<float> part(2);
  t->read_rows(1, 1, part.data());
  CHECK(part == std::vector<float>{1, 4});

  // A source read in several pieces, and output rows read in ranges that do not line up with them.
  const TensorPtr big = tensor({40000, 70});
  const TensorPtr bt = transpose2d(big);
  const std::vector<float> all = bt->values();
  for (uint64_t r = 0; r < 40000; r += 7)
    for (uint64_t c = 0; c < 70; ++c) REQUIRE(all[c * 40000 + r] == big->data[r * 70 + c]);
  std::vector<float> some(3 * 40000);
  bt->read_rows(31, 3, some.data());
  CHECK(std::equal(some.begin(), some.end(), all.begin() + 31 * 40000));
  // A transpose read inside a transpose's read: each takes its own piece buffer.
  CHECK(transpose2d(bt)->values() == big->data);

  const TensorPtr c = concat_rows({m, tensor({1, 3}, 10), tensor({2, 3}, 20)});
  CHECK(c->shape == std::vector<uint64_t>{5, 3});
  CHECK(c->values() == std::vector<float>{0, 1, 2, 3, 4, 5, 10, 11, 12, 20, 21, 22, 23, 24, 25});
  std::vector<float> across(9);
  c->read_rows(1, 3, across.data());  // the end of the first part, all of the second, the start of the third
  CHECK(across == std::vector<float>{3, 4, 5, 10, 11, 12, 20, 21, 22});
  CHECK(same_values(*m, *tensor({2, 3})));
  CHECK(same_values(*c, *c));
  CHECK_FALSE(same_values(*m, *tensor({3, 2})));
  CHECK_FALSE(same_values(*m, *tensor({2, 3}, 1)));
  CHECK_FALSE(same_values(*big, *tensor({40000, 70}, 1)));
  CHECK(same_values(*big, *tensor({40000, 70})));
}

TEST_CASE("container detection by content") {
  const fs::path d = fs::path(MMGPT_TEST_TMP) / "convert_state_dict";
  fs::create_directories(d);
  auto file = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(d / name, std::ios::binary) << bytes;
    return (d / name).string();
  };
  CHECK(detect_container(file("z.safetensors", std::string("PK\x03\x04rest", 8))) == Container::TorchZip);
  CHECK(detect_container(file("l.pt", std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19xx", 16))) ==
        Container::TorchLegacy);
  CHECK(detect_container(file("s.bin", std::string("\x02\0\0\0\0\0\0\0{}", 10))) == Container::Safetensors);
  for (const std::string& junk : {std::string(), std::string("\x80\x02", 2), std::string("\xff\0\0\0\0\0\0\0{}", 10),
                                  std::string("\x02\0\0\0\0\0\0\0[]", 10), std::string("hello world, this is text")})
    CHECK(error_of([&] { detect_container(file("junk.pt", junk)); }).find("not a recognised checkpoint") !=
          std::string::npos);
  CHECK(error_of([&] { detect_container((d / "absent.pt").string()); }).find("absent.pt") != std::string::npos);
}

TEST_CASE("a shard index names files in its own directory that exist, or is refused by name") {
  const fs::path d = fs::path(MMGPT_TEST_TMP) / "convert_shard_index";
  fs::remove_all(d);
  fs::create_directories(d / "sub");
  std::ofstream(d / "a.safetensors") << "x";
  std::ofstream(d / "b.safetensors") << "x";
  std::ofstream(d.parent_path() / "outside.safetensors") << "x";
  fs::create_symlink(d.parent_path() / "outside.safetensors", d / "link.safetensors");
  const std::string index = (d / "model.safetensors.index.json").string();
  auto with = [&](const std::string& json) {
    std::ofstream(index) << json;
    return index;
  };
  const std::vector<Shard> shards =
      read_shard_index(with(R"({"metadata": {"total_size": 8}, "weight_map": {"w1": "a.safetensors",
                            "w2": "b.safetensors", "w3": "a.safetensors"}})"));
  REQUIRE(shards.size() == 2);
  CHECK(fs::path(shards[0].path).filename() == "a.safetensors");
  CHECK(shards[0].tensors == std::vector<std::string>{"w1", "w3"});
  CHECK(shards[1].tensors == std::vector<std::string>{"w2"});
  CHECK(is_shard_index(index));
  CHECK_FALSE(is_shard_index("model.safetensors"));
  const std::pair<std::string, std::string> refused[] = {
      {"[1, 2]", "not a JSON object"},
      {"{\"metadata\": {}}", "no \"weight_map\""},
      {"{\"weight_map\": {}}", "no \"weight_map\""},
      {R"({"weight_map": {"w": 3}})", "expected a file name"},
      {R"({"weight_map": {"w": "../outside.safetensors"}})", "not a file in the index's own directory"},
      {R"({"weight_map": {"w": "/etc/passwd"}})", "not a file in the index's own directory"},
      {R"({"weight_map": {"w": ".."}})", "not a file in the index's own directory"},
      {R"({"weight_map": {"w": "model.safetensors.index.json"}})", "not a file in the index's own directory"},
      {R"({"weight_map": {"w": "c.safetensors"}})", "shard \"c.safetensors\" (for tensor 'w') is missing"},
      {R"({"weight_map": {"w": "sub"}})", "is missing"},
      {R"({"weight_map": {"w": "link.safetensors"}})", "leads outside the index's directory"},
  };
  for (const auto& item : refused) {
    const std::string& json = item.first;  // (clang 14 cannot capture a structured binding)
    const std::string& needle = item.second;
    CAPTURE(json);
    const std::string msg = error_of([&] { read_shard_index(with(json)); });
    CHECK(msg.rfind(index, 0) == 0);
    CHECK(msg.find(needle) != std::string::npos);
  }
}

TEST_CASE("layout detection") {
  auto sd2 = [](std::vector<std::pair<std::string, std::vector<uint64_t>>> items) {
    StateDict sd;
    for (auto& [n, s] : items) sd.entries.emplace_back(n, tensor(s));
    return sd;
  };
  CHECK(detect_layout(sd2({{"transformer.wte.weight", {10, 4}}, {"transformer.h.0.attn.c_attn.weight", {4, 12}}}),
                      "f") == LayoutKind::HfGpt2);
  CHECK(detect_layout(sd2({{"wte.weight", {10, 4}}, {"h.0.attn.c_attn.weight", {4, 12}}}), "f") == LayoutKind::HfGpt2);
  CHECK(detect_layout(sd2({{"transformer.wte.weight", {10, 4}}, {"transformer.h.0.attn.c_attn.weight", {12, 4}}}),
                      "f") == LayoutKind::NanoGpt);
  CHECK(detect_layout(sd2({{"tok_emb.weight", {10, 4}}, {"trf_blocks.0.att.W_query.weight", {4, 4}}}), "f") ==
        LayoutKind::LlmsFromScratch);
  CHECK(error_of([&] {
          detect_layout(sd2({{"transformer.wte.weight", {10, 4}}, {"transformer.h.0.attn.c_attn.weight", {5, 4}}}),
                        "f.pt");
        }).find("[5, 4]") != std::string::npos);
  CHECK(error_of([&] {
          detect_layout(sd2({{"encoder.layer.0.weight", {2}}}), "f.pt");
        }).find("unrecognised checkpoint layout") != std::string::npos);
  CHECK(parse_layout_name("nanogpt") == LayoutKind::NanoGpt);
  CHECK_THROWS_AS(parse_layout_name("auto"), mmgpt::Error);
}
