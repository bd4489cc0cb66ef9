#pragma once
// The bodies of POST /v1/completions and /v1/chat/completions (OpenAI's
// APIs, with llama.cpp's and vLLM's sampling extensions), checked and turned
// into generation options. Independent of the HTTP library, so it is unit-tested and fuzzed
// on its own (tests/fuzz/fuzz_completion_request.cpp).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generation.hpp"

namespace mmgpt::server {

// A request the server refuses: HTTP status, OpenAI's error type, the field at fault.
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, std::string message, std::string param = {},
               std::string type = "invalid_request_error", std::string code = {})
      : std::runtime_error(std::move(message)),
        status(status),
        param(std::move(param)),
        type(std::move(type)),
        code(std::move(code)) {}
  int status;
  std::string param, type, code;
};

// Parses a JSON request body (an object, nested at most a few levels);
// throws RequestError(400) for malformed JSON. The ordered form keeps each
// object's keys in the order sent (a chat template's tojson writes them so).
nlohmann::json parse_json_body(std::string_view body);
nlohmann::ordered_json parse_ordered_json_body(std::string_view body);

// Structured output asked for: response_format json_object / json_schema,
// or llama.cpp's `grammar` (GBNF). `gbnf` is the grammar to constrain
// decoding with (text/grammar.hpp); empty for none.
struct OutputConstraint {
  std::string gbnf;
  std::string param;  // the field it came from, for errors
};

// How many completions one request may ask for: prompts times n.
inline constexpr size_t kMaxChoices = 64;
inline constexpr size_t kMaxN = 16;

struct Prompt {
  std::optional<std::string> text;  // the prompt as text ...
  std::vector<int32_t> ids;         // ... or as token ids
};

struct CompletionRequest {
  std::string model;                    // empty when not given
  std::vector<Prompt> prompts;          // one or more: each gives n choices
  size_t n = 1;                         // completions per prompt (seeds seed, seed + 1, ...)
  GenerateOptions options;              // max_tokens, sampling, seed, stop, ignore_eos; logprobs
  bool seeded = false;                  // a seed was given (otherwise the server draws one)
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool echo = false;                    // the prompt's text comes before the completion (and, with
                                        // logprobs, its tokens' log-probabilities before the completion's)
  bool logprobs = false;                // `logprobs: N` was given: options.top_logprobs = N
  OutputConstraint constraint;          // response_format or grammar (vLLM's and llama.cpp's extensions here)
};

// The defaults of fields a request leaves out.
struct CompletionDefaults {
  size_t max_tokens = 16;  // OpenAI's default
  SamplingOptions sampling;  // mmgpt generate's: temperature 0.8, top-k 200
};

// Checks every field's type and range; throws RequestError naming the field.
// The ordered form keeps a JSON schema's properties in the order sent.
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body, const CompletionDefaults& defaults = {});
CompletionRequest parse_completion_request(const nlohmann::json& body, const CompletionDefaults& defaults = {});

// The body of POST /v1/chat/completions. The messages go to the model's chat
// template as sent (transformers' apply_chat_template sees them so); a
// content part other than text is refused. Every field OpenAI defines is
// honoured or refused naming it: tools, audio, stored completions are refused.
struct ChatRequest {
  std::string model;
  size_t n = 1;                           // choices (seeds seed, seed + 1, ...)
  bool logprobs = false;                  // logprobs: true (and top_logprobs: N in options.top_logprobs)
  nlohmann::ordered_json messages;        // a non-empty array of {"role", "content", ...}
  std::optional<size_t> max_tokens;       // max_completion_tokens or max_tokens; none: up to the context's end
  GenerateOptions options;                // sampling, seed, stop, ignore_eos
  bool seeded = false;
  bool stream = false;
  bool include_usage = false;
  bool add_generation_prompt = true;      // vLLM's extension: false to continue the last message
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // vLLM's chat_template_kwargs
  OutputConstraint constraint;            // response_format, or llama.cpp's grammar
};
ChatRequest parse_chat_request(const nlohmann::ordered_json& body, const CompletionDefaults& defaults = {});

// An error body as OpenAI sends it: {"error": {"message", "type", "param", "code"}}.
std::string error_body(const std::string& message, const std::string& type, const std::string& param = {},
                       const std::string& code = {});

// JSON text; bytes that are not valid UTF-8 become U+FFFD.
std::string dump(const nlohmann::json& j);

}  // namespace mmgpt::server
