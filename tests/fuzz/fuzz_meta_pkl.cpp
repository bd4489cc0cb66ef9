// nanoGPT's meta.pkl (character vocabulary) through read_char_meta on a path.
#include <cstdint>

#include "formats/error.hpp"
#include "text/tokenizer_files.hpp"
#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mmgpt::fuzz::InputFile file("-meta.pkl");
  try {
    (void)mmgpt::read_char_meta(file.write(data, size));
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
