#pragma once
// tiktoken's BPE files read into TokenizerData. They are stored and run as a
// byte-level tokenizer.json BPE (kind Bpe, text/hf_tokenizer.hpp) whose
// pipeline computes exactly what tiktoken computes:
//   special tokens cut first (when allowed), then the pattern's matches (the
//   text between matches is dropped, as tiktoken's find_iter drops it), then
//   each match: its own token when it is one, else merged from its bytes,
//   always the adjacent pair whose concatenation has the lowest rank, the
//   leftmost of equals. Every split of a token into two tokens is a merge at
//   that token's rank, so merges may share a rank (TokenizerData::merge_ranks).
//
// Two files hold tiktoken vocabularies:
//   a rank file: a line "base64(token bytes) rank" per token, as tiktoken's
//     load_tiktoken_bpe reads it. Llama 3's original/tokenizer.model is one.
//     A rank file does not name its pattern or special tokens, so it is read
//     as Meta's Llama 3 tokenizer reads it: Llama 3's pattern, and its 256
//     special tokens after the ranks (named as Meta's llama-models names
//     them), the end of turn and end of message ending a turn, and Llama 3's
//     chat format.
//   a pickled tiktoken Encoding (nanochat's tokenizer.pkl): its name,
//     pattern, ranks and special tokens, read by the restricted unpickler
//     (formats/pickle.hpp), which executes nothing. A vocabulary with
//     nanochat's special tokens gets nanochat's chat format (its
//     render_conversation, as a chat template) and ends a turn at
//     <|assistant_end|> and <|bos|>, as nanochat's engine does.
// The ids (ranks, then special tokens) must run from 0 without gaps. Every
// error names the file and the line or entry.
#include <string>

#include "formats/model_config.hpp"
#include "formats/pickle_value.hpp"

namespace mmgpt {

// A rank file's tokenizer; a file that does not start as a rank file does (a
// base64 token, a space and a rank: a SentencePiece tokenizer.model, say) is
// refused, naming the tokenizer.json to convert with instead.
TokenizerData read_tiktoken_ranks(const std::string& path);

// `root`: the unpickled file, a tiktoken Encoding (formats/pickle.cpp
// rebuilds it as the dict of its state, with "__class__" naming it).
bool is_tiktoken_encoding(const pickle::Value& root);
TokenizerData read_tiktoken_encoding(const pickle::Value& root, const std::string& path);

// The chat templates a tiktoken vocabulary is given (docs/chat-templates.md).
extern const char* const kLlama3ChatTemplate;
extern const char* const kNanochatChatTemplate;

}  // namespace mmgpt
