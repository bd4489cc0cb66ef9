#include "text/chat_format.hpp"

#include "formats/error.hpp"

namespace mmgpt {

using Json = nlohmann::ordered_json;

std::string pick_chat_template(const Json& chat_template, const std::string& where, const std::string& wanted) {
  if (chat_template.is_string()) return chat_template.get<std::string>();
  if (!chat_template.is_array()) throw Error(where + ": chat_template must be a string or a list of {name, template}");
  std::string names;
  for (const Json& entry : chat_template) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
        !entry["template"].is_string())
      throw Error(where + ": chat_template list entries must be {\"name\": string, \"template\": string}");
    if (entry["name"] == wanted) return entry["template"].get<std::string>();
    names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
  }
  throw Error(where + ": chat_template has no template named '" + wanted + "' (it has " + names + ")");
}

ChatFormat ChatFormat::from_tokenizer(const std::string& chat_json, const std::string& where,
                                      const std::string& wanted) {
  if (chat_json.empty()) throw Error(where + ": the model's tokenizer has no chat template");
  const Json chat = Json::parse(chat_json, nullptr, false);
  if (chat.is_discarded() || !chat.is_object() || !chat.contains("chat_template"))
    throw Error(where + ": the tokenizer's chat entry is malformed");
  Json specials = chat.value("special_tokens", Json::object());
  if (!specials.is_object()) throw Error(where + ": the tokenizer's chat special_tokens is not an object");
  return ChatFormat(ChatTemplate::compile(pick_chat_template(chat["chat_template"], where, wanted), where),
                    std::move(specials));
}

ChatFormat ChatFormat::from_text(const std::string& text, const std::string& where, const std::string& wanted) {
  // A tokenizer_config.json is a JSON object; a template that starts with "{{", "{%" or "{#" is not.
  const size_t first = text.find_first_not_of(" \t\r\n");
  const bool may_be_json = first != std::string::npos && text[first] == '{' && text.compare(first, 2, "{{") != 0 &&
                           text.compare(first, 2, "{%") != 0 && text.compare(first, 2, "{#") != 0;
  if (may_be_json) {
    const Json config = Json::parse(text, nullptr, false);
    if (!config.is_discarded() && config.is_object()) {
      auto it = config.find("chat_template");
      if (it == config.end() || it->is_null()) throw Error(where + ": has no chat_template");
      return ChatFormat(ChatTemplate::compile(pick_chat_template(*it, where, wanted), where), Json::object());
    }
  }
  return ChatFormat(ChatTemplate::compile(text, where), Json::object());
}

std::string ChatFormat::render(Json variables, bool add_generation_prompt, const TemplateLimits& limits) const {
  if (!variables.is_object() || !variables.contains("messages") || !variables["messages"].is_array())
    throw Error(template_.name() + ": the template needs \"messages\", a list");
  if (!variables.contains("tools")) variables["tools"] = nullptr;
  if (!variables.contains("documents")) variables["documents"] = nullptr;
  if (add_generation_prompt || !variables.contains("add_generation_prompt"))
    variables["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [name, text] : special_tokens_.items())
    if (!variables.contains(name)) variables[name] = text;
  return template_.render(variables, limits);
}

}  // namespace mmgpt
