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
    // The stored tables searched in place, as loading a model does; a
    // tokenizer.json's are checked only where read, so use them.
    if (const mmgpt::StoredBpeTables* tables = file.bpe_tables()) {
      const mmgpt::StoredTokenizer& stored = file.stored_tokenizer();
      const mmgpt::Tokenizer in_place = stored.kind == mmgpt::TokenizerKind::Bpe
                                            ? mmgpt::Tokenizer(stored, *tables, nullptr, "fuzz.mmgpt")
                                            : mmgpt::Tokenizer(stored.eos_id, *tables, nullptr);
      const std::vector<int32_t> ids = in_place.encode("Hello, w\xC3\xB6rld <|endoftext|> 123 \xE2\x96\x81" "ab");
      (void)in_place.decode(ids);
      for (int32_t id : ids) (void)in_place.token_bytes(id);
    }
  } catch (const mmgpt::Error&) {
    // refused with a message: the expected outcome for most inputs
  }
  return 0;
}
