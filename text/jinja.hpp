#pragma once
// Chat templates: a small, sandboxed Jinja interpreter that renders a Hugging
// Face chat template exactly as Python's Jinja2 does under transformers'
// settings (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, the
// loopcontrols extension, json.dumps as tojson, raise_exception and
// strftime_now). The subset is what real templates use; anything else is a
// compile or render error naming it, never an approximation (docs/chat-templates.md).
// Nothing a template does reaches the host: no I/O, and every render is
// bounded in steps, output, nesting and sizes.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace mmgpt {

// Bounds of one render. Exceeding one is an mmgpt::Error naming the limit.
struct TemplateLimits {
  uint64_t max_steps = 10'000'000;          // expression nodes, statements, loop iterations, calls, bytes/64 built
  uint64_t max_output_bytes = 16u << 20;    // the rendered text, and any one string or list built on the way
  uint32_t max_depth = 64;                  // nested macro calls
  uint64_t max_range = 100'000;             // items of one range() (Jinja2's sandbox allows 100000)
};

namespace jinja {
struct Program;
}

class ChatTemplate {
 public:
  // Parses the whole template up front. Throws mmgpt::Error with one line,
  // "NAME: line L: what is wrong" (unbalanced tags, an unknown tag, filter or
  // test, a bad expression, a construct that is not supported).
  static ChatTemplate compile(std::string_view source, std::string name);

  // Renders with the given variables: a JSON object (messages,
  // add_generation_prompt, bos_token, eos_token, tools, ... whatever the
  // caller passes; transformers passes tools and documents as null when
  // absent). Objects keep their key order, as Python dicts do, so tojson
  // writes keys in the order given. Throws mmgpt::Error
  // "NAME: line L: message": for raise_exception the message is the
  // template's own; past a limit it names the limit.
  std::string render(const nlohmann::ordered_json& variables, const TemplateLimits& limits = {}) const;
  // The same from a nlohmann::json, whose objects are sorted by key.
  std::string render(const nlohmann::json& variables, const TemplateLimits& limits = {}) const;

  const std::string& name() const;

 private:
  std::shared_ptr<const jinja::Program> program_;
};

}  // namespace mmgpt
