// The .mmgpt reader and validator on arbitrary bytes, then what the engine
// builds from a file it accepted: the tokenizer (vocabulary, BPE merges).
// Every accepted tensor view must lie inside the input.
#include <cstdint>
#include <cstdlib>

#include "text/tokenizer.hpp"
#include "formats/error.hpp"
#include "formats/mmgpt_file.hpp"
#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const mmgpt::ModelFile file = mmgpt::parse_model_file_for_test(data, size, "fuzz.mmgpt");
    for (const mmgpt::TensorView& t : file.tensors()) {
      if (t.offset > size || t.nbytes > size - t.offset) std::abort();  // validated view outside the file
      mmgpt::fuzz::touch(t.data, t.nbytes);
    }
    const mmgpt::Tokenizer tokenizer(file.tokenizer());
    for (size_t id = 0; id < tokenizer.size(); ++id) (void)tokenizer.token_bytes(static_cast<int32_t>(id));
  } catch (const mmgpt::Error&) {
    // refused with a message: the expected outcome for most inputs
  }
  return 0;
}
