// GPT-2 tokenizer files: vocab.json and merges.txt. The input is split at its
// first NUL byte: before it the vocab.json text, after it the merges.txt text
// (neither file may contain NUL legitimately, so nothing is lost).
#include <cstdint>
#include <cstring>

#include "formats/error.hpp"
#include "text/tokenizer_files.hpp"
#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mmgpt::fuzz::InputFile vocab("-vocab.json"), merges("-merges.txt");
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t split = nul ? static_cast<size_t>(nul - data) : size;
  vocab.write(data, split);
  merges.write(data + split + (nul ? 1 : 0), size - split - (nul ? 1 : 0));
  try {
    (void)mmgpt::read_bpe_files(vocab.path(), merges.path());
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
