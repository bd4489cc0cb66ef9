// mmgpt serve's request parsing: a POST /v1/completions body and a
// /v1/chat/completions body (the same bytes, both ways) to generation options. Every outcome is a request or a RequestError; an
// accepted request must be one the engine can run (its sampling options pass
// the Sampler's checks), and every error body must be valid JSON.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/sampler.hpp"
#include "formats/error.hpp"
#include "server/completion_request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mmgpt;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    const server::CompletionRequest r = server::parse_completion_request(server::parse_json_body(body));
    if (r.prompts.empty() || r.prompts.size() * r.n > server::kMaxChoices || r.n == 0) std::abort();
    for (const server::Prompt& p : r.prompts) {
      if (p.text ? p.text->empty() : p.ids.empty()) std::abort();
      for (int32_t id : p.ids)
        if (id < 0) std::abort();
    }
    if (r.options.top_logprobs > kMaxTopLogprobs) std::abort();
    if (r.options.max_new_tokens > (uint64_t{1} << 24)) std::abort();
    Sampler check(r.options.sampling);  // throws mmgpt::Error (a crash here) for options out of range
    (void)check;
  } catch (const server::RequestError& e) {
    if (e.status != 400) std::abort();
    const nlohmann::json j = nlohmann::json::parse(server::error_body(e.what(), e.type, e.param, e.code));
    if (!j["error"]["message"].is_string()) std::abort();
  }
  // The same bytes as a chat completion's body.
  try {
    const server::ChatRequest r = server::parse_chat_request(server::parse_ordered_json_body(body));
    if (!r.messages.is_array() || r.messages.empty()) std::abort();
    if (r.max_tokens && *r.max_tokens > (uint64_t{1} << 24)) std::abort();
    if (r.n == 0 || r.n > server::kMaxN || r.options.top_logprobs > kMaxTopLogprobs) std::abort();
    Sampler check(r.options.sampling);
    (void)check;
  } catch (const server::RequestError& e) {
    if (e.status != 400) std::abort();
    const nlohmann::json j = nlohmann::json::parse(server::error_body(e.what(), e.type, e.param, e.code));
    if (!j["error"]["message"].is_string()) std::abort();
  }
  return 0;
}
