// The restricted unpickler: every opcode family against what Python wrote,
// hand-made pickles for opcodes CPython never emits, refusal of os.system,
// and hostile inputs (truncation, corruption, absurd lengths).
#include <doctest/doctest.h>

#include <filesystem>

#include "formats/pickle.hpp"
#include "formats/torch_checkpoint.hpp"
#include "formats_fixtures.hpp"

using mmgpt::pickle::Value;
using mmgpt::pickle::ValuePtr;
using K = Value::Kind;

namespace {

const std::string& fx() { return fixtures::dir("formats_pickle"); }

ValuePtr load(const std::string& bytes, const mmgpt::pickle::PersistentLoad& pl = {}) {
  return mmgpt::pickle::unpickle(bytes.data(), bytes.size(), "test.pkl", pl);
}

// A string literal with embedded NULs.
template <size_t N>
std::string B(const char (&s)[N]) {
  return std::string(s, N - 1);
}

std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string u64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
// Appending (rather than "J" + string) avoids a GCC 12 -Wrestrict false positive.
std::string binint(int32_t v) {
  std::string p = "J";
  return p += u32(static_cast<uint32_t>(v));
}
std::string str(const std::string& s) {
  std::string p = "X";
  p += u32(static_cast<uint32_t>(s.size()));
  return p += s;
}

// _rebuild_tensor_v2(<pid>, offset, sizes, strides, False, OrderedDict()) in protocol 2.
std::string rebuild(int32_t offset, const std::vector<int32_t>& sizes, const std::vector<int32_t>& strides) {
  std::string p =
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor_v2\n(" +
      str("pid") + "Q" + binint(offset) + "(";
  for (int32_t s : sizes) p += binint(s);
  p += "t(";
  for (int32_t s : strides) p += binint(s);
  return p +
         "t\x89"
         "ccollections\nOrderedDict\n)Rt"
         "R.";
}

// A storage holding 0, 1, ..., n-1 (or a placeholder when `placeholder`).
mmgpt::pickle::PersistentLoad storage(uint64_t n, bool placeholder = false) {
  return [=](const Value& pid) -> ValuePtr {
    REQUIRE(pid.kind == K::String);
    auto t = std::make_shared<mmgpt::HostTensor>();
    t->shape = {n};
    t->source_dtype = "float32";
    if (!placeholder)
      for (uint64_t i = 0; i < n; ++i) t->data.push_back(static_cast<float>(i));
    auto v = std::make_shared<Value>();
    v->kind = K::Tensor;
    v->tensor = t;
    return v;
  };
}

}  // namespace

TEST_CASE("plain pickles of every protocol match what Python wrote") {
  for (int p = 0; p <= 5; ++p) {
    CAPTURE(p);
    const std::string path = fx() + "/plain_p" + std::to_string(p) + ".pkl";
    const ValuePtr v = mmgpt::load_pickle_file(path);
    CHECK(fixtures::canon(*v) == fixtures::read_file(path + ".txt"));
    const std::string bytes = fixtures::read_file(path);
    CHECK(mmgpt::pickle::pickle_length(bytes.data(), bytes.size(), path) == bytes.size());
    // Shared references come back as one object, as in Python.
    CHECK(v->get("shared_a") == v->get("shared_b"));
  }
}

TEST_CASE("meta.pkl: stoi and itos") {
  const std::string path = fx() + "/meta.pkl";
  const ValuePtr v = mmgpt::load_pickle_file(path);
  CHECK(fixtures::canon(*v) == fixtures::read_file(path + ".txt"));
  REQUIRE(v->get("stoi"));
  REQUIRE(v->get("stoi")->get("a"));
  const int64_t a = v->get("stoi")->get("a")->integer;
  bool found = false;
  for (const auto& [k, val] : v->get("itos")->entries)
    if (k->integer == a) found = val->text == "a";
  CHECK(found);
  CHECK(v->get("vocab_size")->integer == static_cast<int64_t>(v->get("stoi")->entries.size()));
}

TEST_CASE("a pickle calling os.system is refused by name and nothing runs") {
  for (const char* name : {"evil_p0.pkl", "evil_p2.pkl", "evil_p4.pkl"}) {
    CAPTURE(name);
    const std::string path = fx() + "/" + name;
    fixtures::expect_error([&] { mmgpt::load_pickle_file(path); }, {"posix.system", path, "refused"});
    CHECK_FALSE(std::filesystem::exists(fx() + "/MARKER"));
  }
  fixtures::expect_error([] { load("cbuiltins\neval\n."); }, {"builtins.eval"});
  fixtures::expect_error(
      [] {
        load("\x80\x04" + std::string("\x8c\x08") +
             "builtins"
             "\x8c\x03set\x93.");
      },
      {"builtins.set"});
  fixtures::expect_error([] { load("ctorch.storage\n_load_from_bytes\n."); }, {"torch.storage._load_from_bytes"});
}

TEST_CASE("opcodes CPython does not emit for plain objects") {
  CHECK(load("\x80\x02(K\x01K\x02"
             "1K\x05"
             "20.")
            ->integer == 5);              // POP_MARK, DUP, POP
  CHECK(load("(0K\x07.")->integer == 7);  // POP of a bare MARK
  CHECK(load("\x8b" + u32(9) + std::string("\xff\xff\xff\xff\xff\xff\xff\x7f\x00", 9) + ".")->integer == INT64_MAX);
  CHECK(load(std::string("\x8b\x01\x00\x00\x00\xfe.", 7))->integer == -2);
  CHECK(load(std::string("\x8a\x00.", 3))->integer == 0);
  fixtures::expect_error([] { load("\x8b" + u32(9) + std::string("\0\0\0\0\0\0\0\0\x01", 9) + "."); }, {"64 bits"});
  fixtures::expect_error(
      [] { load(std::string("\x8a\x08\0\0\0\0\0\0\0\x80", 10) + std::string("\x8a\x09\0\0\0\0\0\0\0\x80\0.", 12)); },
      {"64 bits"});
  CHECK(load("\x8d" + u64(3) + "abc.")->text == "abc");  // BINUNICODE8
  const ValuePtr b8 = load("\x8e" + u64(2) + "xy.");     // BINBYTES8
  CHECK((b8->kind == K::Bytes && b8->text == "xy"));
  CHECK(load("\x96" + u64(1) + "z.")->kind == K::Bytes);   // BYTEARRAY8
  CHECK(load("S'a\\nb\\x41\\'c'\n.")->text == "a\nbA'c");  // STRING
  CHECK(load("T" + u32(2) + "hi.")->text == "hi");         // BINSTRING
  CHECK(load("U\x01x.")->text == "x");                     // SHORT_BINSTRING
  CHECK(load("Vsnow \\u2603 \\U0001f600\n.")->text == "snow \xe2\x98\x83 \xf0\x9f\x98\x80");
  CHECK(load("F1.5\n.")->real == 1.5);
  CHECK(load("I01\n.")->kind == K::Bool);
  CHECK(load("L-123L\n.")->integer == -123);
  CHECK(load("\x80\x04\x95" + u64(3) + "K\x09.")->integer == 9);  // FRAME
  // NEWOBJ on OrderedDict, then SETITEM
  const ValuePtr od = load(
      "\x80\x02"
      "ccollections\nOrderedDict\n)\x81" +
      str("a") + "K\x01s.");
  REQUIRE(od->is_dict());
  CHECK(od->get("a")->integer == 1);
  // OrderedDict built from a list of pairs, and BUILD state ignored
  const ValuePtr od3 = load("ccollections\nOrderedDict\n]" + str("k") +
                            "K\x02"
                            "\x86"
                            "a\x85R}b.");
  CHECK(od3->get("k")->integer == 2);
  // MEMOIZE + BINGET: one object twice
  const ValuePtr t = load(B("\x80\x04]\x94h\x00\x86."));
  CHECK(t->items[0].get() == t->items[1].get());
  // persistent ids
  int calls = 0;
  auto pl = [&](const Value& pid) -> ValuePtr {
    ++calls;
    auto v = std::make_shared<Value>();
    v->kind = K::Int;
    v->integer = static_cast<int64_t>(pid.text.size());
    return v;
  };
  CHECK(load("Pkey\n.", pl)->integer == 3);
  CHECK(load(str("abcd") + "Q.", pl)->integer == 4);
  CHECK(calls == 2);
  fixtures::expect_error([] { load("Pkey\n."); }, {"persistent id"});
}

TEST_CASE("tensor rebuild honours offset and strides, validated against the storage") {
  // A 2x3 view at offset 1 with strides (1, 2) of 0..9: the transpose of a 3x2 slice.
  const ValuePtr v = load(rebuild(1, {2, 3}, {1, 2}), storage(10));
  REQUIRE(v->is_tensor());
  CHECK(v->tensor->shape == std::vector<uint64_t>{2, 3});
  CHECK(v->tensor->values() == std::vector<float>{1, 3, 5, 2, 4, 6});
  CHECK(load(rebuild(4, {}, {}), storage(10))->tensor->values() == std::vector<float>{4});
  CHECK(load(rebuild(0, {3, 0}, {1, 1}), storage(0))->tensor->values().empty());
  // A placeholder storage gives a shaped tensor without data.
  const ValuePtr p = load(rebuild(0, {2, 5}, {5, 1}), storage(10, true));
  CHECK((p->tensor->shape == std::vector<uint64_t>{2, 5} && !p->tensor->readable()));
  fixtures::expect_error([] { load(rebuild(1, {2, 5}, {5, 1}), storage(10)); }, {"past the storage", "test.pkl"});
  fixtures::expect_error([] { load(rebuild(0, {4}, {-1}), storage(10)); }, {"negative"});
  fixtures::expect_error([] { load(rebuild(-1, {1}, {1}), storage(10)); }, {"negative"});
  fixtures::expect_error(
      [] {
        load(rebuild(0, {1 << 30, 1 << 30}, {0, 0}), storage(10));
      },
      {"elements from a storage"});
  fixtures::expect_error([] { load(rebuild(0, {2, 3}, {1}), storage(10)); }, {"equal length"});
  fixtures::expect_error([] { load(B("ctorch._utils\n_rebuild_tensor_v2\n(K\x01K\x00))\x89NtR."), storage(1)); },
                         {"not a storage"});
}

TEST_CASE("malformed pickles give mmgpt::Error") {
  fixtures::expect_error([] { load(""); }, {"STOP"});
  fixtures::expect_error([] { load("\xff."); }, {"unknown pickle opcode 0xff"});
  fixtures::expect_error([] { load("a."); }, {"underflow"});
  fixtures::expect_error([] { load("h\x05."); }, {"memo index 5"});
  fixtures::expect_error(
      [] {
        load(
            "X\xff\xff\xff\x7f"
            "abc.");
      },
      {"declared length 2147483647"});
  fixtures::expect_error([] { load("\x8e" + u64(UINT64_MAX) + "."); }, {"declared length"});
  fixtures::expect_error([] { load("T\xff\xff\xff\xff."); }, {"negative length"});
  fixtures::expect_error([] { load("\x95" + u64(1ull << 40) + "."); }, {"frame"});
  fixtures::expect_error([] { load("K\x01K\x02."); }, {"2 values"});
  fixtures::expect_error([] { load("\x80\x09N."); }, {"protocol 9"});
  fixtures::expect_error(
      [] {
        load(
            B("]\x94h\x00"
              "a."));
      },
      {"recursive"});
  fixtures::expect_error([] { load(std::string(2000, ']') + std::string(1999, 'a') + "."); }, {"nested deeper"});
  fixtures::expect_error([] { load("K\x01K\x02K\x03s."); }, {"not a dict"});
  fixtures::expect_error([] { load("ctorch\nTensor\n)\x81."); }, {"NEWOBJ"});
  fixtures::expect_error([] { load("K\x01)R."); }, {"REDUCE"});
  fixtures::expect_error([] { load("ctorch\nFloatStorage\n)R."); }, {"type"});
  fixtures::expect_error([] { load("I12345678901234567890\n."); }, {"64-bit"});
  fixtures::expect_error([] { load("i__main__\nEvil\n."); }, {"unsupported pickle opcode"});
  fixtures::expect_error([] { mmgpt::load_pickle_file(fx() + "/does_not_exist.pkl"); }, {"does_not_exist.pkl"});
}

TEST_CASE("truncated and corrupted pickles never crash") {
  for (int p : {0, 2, 5}) {
    const std::string bytes = fixtures::read_file(fx() + "/plain_p" + std::to_string(p) + ".pkl");
    for (size_t n = 0; n < bytes.size(); ++n) {
      const std::string cut = bytes.substr(0, n);
      fixtures::expect_error([&] { load(cut); }, {"test.pkl"});
      fixtures::expect_error([&] { mmgpt::pickle::pickle_length(cut.data(), cut.size(), "test.pkl"); }, {"test.pkl"});
    }
    for (size_t i = 0; i < bytes.size(); ++i)
      for (unsigned char x : {0x00, 0x01, 0x80, 0xff}) {
        std::string bad = bytes;
        bad[i] = static_cast<char>(bad[i] ^ x ^ 0x5a);
        fixtures::ok_or_error([&] { load(bad); });
      }
  }
}
