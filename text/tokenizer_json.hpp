#pragma once
// Hugging Face's tokenizer files read into TokenizerData:
//   tokenizer.json with a BPE model: its vocabulary and merges (written as
//   "a b" strings or ["a", "b"] pairs), added tokens and the pipeline around
//   the model (text/hf_tokenizer.hpp), stored as kind Bpe. A tokenizer.json
//   that is exactly GPT-2's (byte-level BPE, GPT-2's regex, no normalizer, at
//   most "<|endoftext|>" added) is stored as kind Gpt2Bpe, whose tables the
//   file keeps ready to search.
//   tokenizer_config.json beside it, when present: eos_token names the end
//   token.
// Every error names the file and the entry; what the tokenizer cannot compute
// exactly is refused at conversion, naming the part.
#include <string>

#include "formats/model_config.hpp"

namespace mmgpt {

TokenizerData read_tokenizer_json(const std::string& tokenizer_json);

}  // namespace mmgpt
