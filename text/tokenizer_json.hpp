#pragma once
// Hugging Face's tokenizer files read into TokenizerData:
//   tokenizer.json with a BPE model: its vocabulary and merges (written as
//   "a b" strings or ["a", "b"] pairs), added tokens and the pipeline around
//   the model (text/hf_tokenizer.hpp), stored as kind Bpe. A tokenizer.json
//   that is exactly GPT-2's (byte-level BPE, GPT-2's regex, no normalizer, at
//   most "<|endoftext|>" added) is stored as kind Gpt2Bpe, whose tables the
//   file keeps ready to search.
//   tokenizer_config.json beside it, when present: eos_token names the end
//   token; chat_template (a string, or a list of named templates) is kept
//   with the special tokens' text it is rendered with (bos_token, eos_token,
//   unk_token, pad_token), as the pipeline's "chat" entry. With a Llama or
//   Gemma tokenizer_class, add_bos_token and add_eos_token rebuild the
//   post-processor, as transformers' tokenizers of those classes do.
//   generation_config.json beside it, when present: eos_token_id (an id or
//   a list) adds the tokens that end a turn; all of them stop generation.
// Every error names the file and the entry; what the tokenizer cannot compute
// exactly is refused at conversion, naming the part.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "formats/model_config.hpp"

namespace mmgpt {

TokenizerData read_tokenizer_json(const std::string& tokenizer_json);

// The last step of reading any kind-Bpe tokenizer (tokenizer.json, tiktoken
// files): t holds its tokens, merges and merge ranks; `pipeline` is the rest
// (tokenizer.json without the model's vocab and merges). Builds the tokenizer
// once, so conversion refuses what loading would (mmgpt::Error naming
// `where`), and fills what the file keeps: the pipeline's text, each token's
// key and bytes, and each byte's token.
void finish_bpe_tokenizer(TokenizerData& t, const nlohmann::json& pipeline, const std::string& where);

}  // namespace mmgpt
