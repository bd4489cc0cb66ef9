// tokenizer.json (with a tokenizer_config.json and a generation_config.json
// beside it): read, built, then used. The input is split at its NUL bytes:
// the tokenizer.json text, the tokenizer_config.json text, the
// generation_config.json text, then a text to encode (missing parts are
// absent files, or no text). What reads a tokenizer builds it once, so a
// file that passes is also encoded and the ids decoded.
#include <cstdint>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <string>
#include <string_view>

#include "formats/error.hpp"
#include "text/tokenizer.hpp"
#include "text/tokenizer_json.hpp"

namespace {

const std::filesystem::path& dir() {
  static const std::filesystem::path d = [] {
    std::filesystem::path p = "/dev/shm/mmgpt-fuzz-tokenizer-json-" + std::to_string(::getpid());
    std::filesystem::create_directories(p);
    return p;
  }();
  return d;
}

void put(const char* name, const std::string_view* part) {
  const std::filesystem::path p = dir() / name;
  if (!part) {
    std::filesystem::remove(p);
    return;
  }
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f || (!part->empty() && std::fwrite(part->data(), 1, part->size(), f) != part->size()) || std::fclose(f) != 0)
    std::abort();  // a harness fault, not a finding
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size), parts[4];
  size_t n = 0;
  while (n < 3) {
    const size_t nul = rest.find('\0');
    if (nul == std::string_view::npos) break;
    parts[n++] = rest.substr(0, nul);
    rest.remove_prefix(nul + 1);
  }
  parts[n++] = rest;
  put("tokenizer.json", &parts[0]);
  put("tokenizer_config.json", n > 1 ? &parts[1] : nullptr);
  put("generation_config.json", n > 2 ? &parts[2] : nullptr);
  try {
    const mmgpt::Tokenizer t(mmgpt::read_tokenizer_json((dir() / "tokenizer.json").string()));
    if (n > 3) {
      const std::vector<int32_t> ids = t.encode(parts[3], true, true);
      (void)t.decode(ids);
      for (int32_t id : ids) (void)t.token_bytes(id);
    }
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
