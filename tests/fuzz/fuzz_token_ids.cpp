// Id prompts (--ids): parse_token_ids on arbitrary text. The first byte picks
// a vocabulary size; every id accepted must lie inside it.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "formats/error.hpp"
#include "tools/cli/token_ids.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static constexpr uint64_t kVocab[] = {1, 65, 50257, 50304, 0x7fffffff};
  const uint64_t vocab = kVocab[data[0] % 5];
  try {
    for (int32_t id :
         mmgpt::cli::parse_token_ids(std::string(reinterpret_cast<const char*>(data + 1), size - 1), vocab))
      if (id < 0 || static_cast<uint64_t>(id) >= vocab) std::abort();
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
