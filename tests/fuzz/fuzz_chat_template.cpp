// Chat templates: the input is a template's source, compiled and rendered over
// a fixed small conversation with small limits. Every failure must be an
// mmgpt::Error (a parse error, a template error or a limit); anything else
// escaping, a crash, a hang or a sanitizer report is a finding.
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "formats/error.hpp"
#include "text/jinja.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json variables = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this? 日本 🙂"}]},
      {"role": "assistant", "content": "<think>\nhm\n</think>\n\nA cat.", "reasoning_content": null,
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1.5, "y": [true, null]}}}]},
      {"role": "tool", "content": "{\"ok\": 1}"},
      {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
  })");
  mmgpt::TemplateLimits limits;
  limits.max_steps = 20000;
  limits.max_output_bytes = 1 << 16;
  limits.max_depth = 16;
  limits.max_range = 1000;
  try {
    const auto t = mmgpt::ChatTemplate::compile(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    (void)t.render(variables, limits);
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
