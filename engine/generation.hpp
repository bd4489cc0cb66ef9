#pragma once
// What generation takes and gives: its options, the events a caller sees as
// tokens are made, and the result. Shared by the public API (mmgpt.hpp) and
// the generator that implements it (generator.hpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/weight_type.hpp"
#include "engine/logprobs.hpp"
#include "engine/sampler.hpp"

namespace mmgpt {

class Grammar;  // text/grammar.hpp

struct GenerateOptions {
  size_t max_new_tokens = 256;
  SamplingOptions sampling;               // greedy or temperature / top-k / top-p / min-p / repetition penalty; seed
  bool ignore_eos = false;                // keep going past the end-of-text token
  std::vector<std::string> stop;          // stop at any of these strings (matched across tokens; not emitted)
  WeightType kv_dtype = WeightType::F32;  // KV cache elements: f32, or bf16 / f16 (half the memory and cache traffic)
  // For generate() and generate_batch(): prompts run in steps of at most
  // this many tokens (0: each prompt in one step). The tokens are the same
  // either way; smaller steps let `interrupt` be asked sooner in a long prompt.
  size_t prefill_chunk = 0;
  // For generate() and generate_batch(): asked before every step when set;
  // true ends every unfinished sequence (StopReason::Callback). Stops a
  // generation from outside (Ctrl-C) without waiting for its next token.
  std::function<bool()> interrupt;
  // Log-probabilities (engine/logprobs.hpp) of each generated token, with the
  // top_logprobs (at most kMaxTopLogprobs) most likely tokens at its step:
  // GenerationResult::logprobs.
  bool logprobs = false;
  size_t top_logprobs = 0;
  // The same for each prompt token after the first, given the tokens before
  // it (GenerationResult::prompt_logprobs). The whole prompt is run then,
  // never taken from a prefix cache, and max_new_tokens may be 0: the prompt
  // is scored and nothing is generated.
  bool prompt_logprobs = false;
  // Constrained decoding: only tokens the grammar allows are sampled (the
  // others' logits are -infinity before every sampling option), an end token
  // only once the output is a whole sentence of it; generation ends when
  // nothing may follow (text/grammar.hpp; json_schema_grammar() makes one
  // from a JSON schema). Null: no constraint.
  std::shared_ptr<const Grammar> grammar;
};

enum class StopReason { Length, EndOfText, StopString, Callback };

// How the command line's JSON and the Python package name a stop reason.
inline const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Length: return "length";
    case StopReason::EndOfText: return "eos";
    case StopReason::StopString: return "stop";
    case StopReason::Callback: return "interrupted";
  }
  return "length";
}

// One generated token, as the callback sees it.
struct TokenEvent {
  size_t sequence = 0;    // index of the prompt in a batch (0 for a single prompt)
  int32_t token = 0;      // -1 for the last event of a sequence that only releases held-back text
  std::string_view text;  // bytes that became printable with this token: never half a UTF-8
                          // character, never part of a stop string; may be empty
};
// Return false to stop that sequence.
using TokenCallback = std::function<bool(const TokenEvent&)>;

struct GenerationTimings {
  double prefill_seconds = 0.0;  // running the prompt (up to the first token's logits)
  double decode_seconds = 0.0;   // the remaining steps
  size_t prompt_tokens = 0;
  size_t decode_steps = 0;  // forward steps after the prefill
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (an end-of-text token that stopped generation is not included)
  std::string text;             // their bytes, cut before a stop string
  StopReason reason = StopReason::Length;
  GenerationTimings timings;
  std::vector<PositionLogprobs> logprobs;         // with GenerateOptions::logprobs: one per generated token
  std::vector<PositionLogprobs> prompt_logprobs;  // with prompt_logprobs: prompt tokens 1.. (the first has none)
};

}  // namespace mmgpt
