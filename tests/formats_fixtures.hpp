#pragma once
// Shared by tests/test_formats_{pickle,torch,safetensors}.cpp: generates the
// fixtures with tests/fixtures/make_torch_fixtures.py (PyTorch) once per test
// executable, and renders what a reader returned in the same canonical text
// that the script writes beside each fixture (X.txt), so comparisons are exact.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "formats/error.hpp"
#include "formats/pickle_value.hpp"

namespace fixtures {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE_MESSAGE(out.good(), "cannot write " << path);
}

// The fixture directory for this executable, generated on first use.
inline const std::string& dir(const std::string& name) {
  static const std::string d = [&] {
    const std::string out = std::string(MMGPT_TEST_TMP) + "/" + name;
    std::filesystem::create_directories(out);
    std::filesystem::remove(out + "/MARKER");
    const std::string cmd = std::string(MMGPT_PYTHON) + " " + MMGPT_SOURCE_DIR +
                            "/tests/fixtures/make_torch_fixtures.py '" + out + "' '" + out + "/MARKER'";
    const int rc = std::system(cmd.c_str());
    REQUIRE_MESSAGE(rc == 0,
                    "fixture generation failed (" << cmd << "); it needs PyTorch: apt-get install python3-torch");
    REQUIRE_MESSAGE(!std::filesystem::exists(out + "/MARKER"), "the fixture script itself created MARKER");
    return out;
  }();
  return d;
}

inline std::string hex(const void* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const unsigned b = static_cast<const unsigned char*>(p)[i];
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

inline std::string canon(const mmgpt::HostTensor& t) {
  std::string s = "X" + t.source_dtype + "[";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i) s += "x";
    s += std::to_string(t.shape[i]);
  }
  s += "]:";
  const std::vector<float> v = t.readable() ? t.values() : std::vector<float>{};
  return s += hex(v.data(), v.size() * sizeof(float));
}

// Must match canon() in make_torch_fixtures.py. (Built by appending: GCC 12
// warns falsely (-Wrestrict) about "literal" + std::string.)
inline void canon_into(std::string& out, const mmgpt::pickle::Value& v) {
  using K = mmgpt::pickle::Value::Kind;
  switch (v.kind) {
    case K::None: out += "N"; return;
    case K::Bool: out += v.boolean ? "T" : "F"; return;
    case K::Int:
      out += "i";
      out += std::to_string(v.integer);
      return;
    case K::Float: {
      char buf[64];
      if (std::isnan(v.real))
        std::snprintf(buf, sizeof buf, "nan");
      else
        std::snprintf(buf, sizeof buf, "%.17g", v.real);
      out += "f";
      out += buf;
      return;
    }
    case K::String:
      out += "s";
      out += std::to_string(v.text.size());
      out += ":";
      out += v.text;
      return;
    case K::Bytes:
      out += "b";
      out += hex(v.text.data(), v.text.size());
      return;
    case K::List:
    case K::Tuple:
      out += v.kind == K::List ? "L[" : "T(";
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += ",";
        canon_into(out, *v.items[i]);
      }
      out += v.kind == K::List ? "]" : ")";
      return;
    case K::Dict:
      out += "D{";
      for (size_t i = 0; i < v.entries.size(); ++i) {
        if (i) out += ",";
        canon_into(out, *v.entries[i].first);
        out += ":";
        canon_into(out, *v.entries[i].second);
      }
      out += "}";
      return;
    case K::Tensor: out += canon(*v.tensor); return;
  }
}

inline std::string canon(const mmgpt::pickle::Value& v) {
  std::string out;
  canon_into(out, v);
  return out;
}

// Runs f, which must throw mmgpt::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const mmgpt::Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      CHECK_MESSAGE(msg.find(p) != std::string::npos, "message '" << msg << "' lacks '" << p << "'");
    return;
  }
  FAIL("no mmgpt::Error thrown, expected one mentioning " << (parts.empty() ? "" : parts[0]));
}

// Runs f; success and mmgpt::Error are both fine, anything else (or a crash) is not.
inline bool ok_or_error(const std::function<void()>& f) {
  try {
    f();
    return true;
  } catch (const mmgpt::Error&) {
    return true;
  } catch (const std::exception& e) {
    FAIL("unexpected exception type: " << e.what());
  }
  return false;
}

}  // namespace fixtures
