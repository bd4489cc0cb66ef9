// Text prompts: GPT-2 byte-level BPE on arbitrary bytes (any bytes are valid
// input, UTF-8 or not) with the bundled vocabulary. Encoding never throws and
// decoding the ids must give back exactly the input bytes; the first byte
// chooses whether "<|endoftext|>" is read as the special token.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "text/tokenizer.hpp"
#include "text/tokenizer_files.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mmgpt::Tokenizer tokenizer(
      mmgpt::read_bpe_files(MMGPT_SOURCE_DIR "/data/gpt2/encoder.json", MMGPT_SOURCE_DIR "/data/gpt2/vocab.bpe"));
  if (size == 0) return 0;
  const bool allow_special = data[0] & 1;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<int32_t> ids = tokenizer.encode(text, allow_special);
  for (int32_t id : ids)
    if (id < 0 || static_cast<size_t>(id) >= tokenizer.size()) std::abort();
  if (tokenizer.decode(ids) != text) {
    std::fprintf(stderr, "GPT-2 BPE round trip changed the text (%zu bytes, %zu tokens)\n", text.size(), ids.size());
    std::abort();
  }
  return 0;
}
