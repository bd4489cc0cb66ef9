#pragma once
// A model's chat format: its chat template (text/jinja.hpp) and the special
// tokens' text the template is given, from the model's tokenizer (the "chat"
// entry a tokenizer_config.json or a tiktoken file's family gave it) or from
// a template file. What `mmgpt chat-template`, `mmgpt serve`'s chat endpoint
// and Python's chat render with, as transformers' apply_chat_template(...,
// tokenize=False) does.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "text/jinja.hpp"

namespace mmgpt {

class ChatFormat {
 public:
  // The tokenizer's chat entry (Tokenizer::chat_json(); `where` names the
  // model in errors). `wanted` picks one of a list of named templates.
  // Throws mmgpt::Error when the tokenizer has no template.
  static ChatFormat from_tokenizer(const std::string& chat_json, const std::string& where,
                                   const std::string& wanted = "default");
  // A template file's text: a Jinja template, or a tokenizer_config.json
  // whose chat_template is a string or a list of {"name", "template"}.
  static ChatFormat from_text(const std::string& text, const std::string& where, const std::string& wanted = "default");

  // The variables transformers passes: `variables` (at least "messages"; an
  // object, in the caller's key order), tools and documents as null when
  // absent, add_generation_prompt, and the special tokens' text the format
  // carries where the caller gave none. Throws mmgpt::Error
  // "NAME: line L: ..." for what the template refuses (raise_exception) or
  // a limit it reaches.
  std::string render(nlohmann::ordered_json variables, bool add_generation_prompt,
                     const TemplateLimits& limits = {}) const;

  const ChatTemplate& chat_template() const { return template_; }
  // The special tokens' text (bos_token, eos_token, ...) from the tokenizer's files.
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  ChatFormat(ChatTemplate t, nlohmann::ordered_json special_tokens)
      : template_(std::move(t)), special_tokens_(std::move(special_tokens)) {}
  ChatTemplate template_;
  nlohmann::ordered_json special_tokens_;
};

// The template of a chat_template value: a string, or a list of {"name",
// "template"} of which `wanted` is picked. Throws naming `where`.
std::string pick_chat_template(const nlohmann::ordered_json& chat_template, const std::string& where,
                               const std::string& wanted);

}  // namespace mmgpt
