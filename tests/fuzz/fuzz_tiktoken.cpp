// tiktoken files (text/tiktoken.hpp): a rank file, or a pickle (a tiktoken
// Encoding, else a meta.pkl), read, built, then used. The input's first byte
// picks the kind (even: a rank file, odd: a pickle); the text to encode runs to
// the first NUL after it, and the file is the rest.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/error.hpp"
#include "text/tokenizer.hpp"
#include "text/tiktoken.hpp"
#include "text/tokenizer_files.hpp"
#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mmgpt::fuzz::InputFile rank_file("-tokenizer.model"), pickle_file("-tokenizer.pkl");
  if (size == 0) return 0;
  const bool pickled = data[0] & 1;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view text = nul == std::string_view::npos ? std::string_view() : rest.substr(0, nul);
  const std::string_view file = nul == std::string_view::npos ? rest : rest.substr(nul + 1);
  const auto* bytes = reinterpret_cast<const uint8_t*>(file.data());
  try {
    const mmgpt::Tokenizer t(pickled ? mmgpt::read_pickled_tokenizer(pickle_file.write(bytes, file.size()))
                                     : mmgpt::read_tiktoken_ranks(rank_file.write(bytes, file.size())));
    const std::vector<int32_t> ids = t.encode(text, true, true);
    (void)t.decode(ids);
    for (int32_t id : ids) (void)t.token_bytes(id);
    (void)t.encode(text, false, false);
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
