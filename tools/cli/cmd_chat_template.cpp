// mmgpt chat-template: renders a chat template (text/jinja.hpp) over a
// conversation and prints the prompt exactly, as transformers'
// apply_chat_template(..., tokenize=False) returns it.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/mmgpt.hpp"
#include "formats/error.hpp"
#include "text/chat_format.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/validate.hpp"

namespace mmgpt::cli {

namespace {

using Json = nlohmann::ordered_json;

struct ChatTemplateArgs {
  std::string model, template_file, template_name = "default", messages_file, bos_token, eos_token;
  bool add_generation_prompt = false, has_bos = false, has_eos = false;
  std::vector<std::string> vars;  // NAME=JSON
};

std::string read_file(const std::string& option, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(option + ": file not found: " + path);
  if (std::filesystem::is_directory(path, ec)) throw Error(option + ": " + path + " is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(option + ": cannot open " + path + ": " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(option + ": cannot read " + path + ": " + std::strerror(errno));
  return bytes;
}

// The variables of the --messages file (a list of messages, or an object of
// template variables holding "messages"), the special tokens given, then any
// --var. ChatFormat::render adds the rest as transformers does.
Json template_variables(const ChatTemplateArgs& a) {
  const std::string text = read_file("--messages", a.messages_file);
  Json given = Json::parse(text, nullptr, false);
  if (given.is_discarded()) throw Error(a.messages_file + ": not valid JSON");
  Json vars = Json::object();
  if (given.is_array()) {
    vars["messages"] = std::move(given);
  } else if (given.is_object()) {
    if (!given.contains("messages")) throw Error(a.messages_file + ": the object has no \"messages\"");
    vars = std::move(given);
  } else {
    throw Error(a.messages_file + ": must hold a list of messages or an object of template variables");
  }
  if (!vars["messages"].is_array()) throw Error(a.messages_file + ": \"messages\" must be a list");
  if (a.has_bos) vars["bos_token"] = a.bos_token;
  if (a.has_eos) vars["eos_token"] = a.eos_token;
  for (const std::string& v : a.vars) {
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0) throw Error("--var: expected NAME=JSON, got '" + v + "'");
    Json value = Json::parse(v.substr(eq + 1), nullptr, false);
    if (value.is_discarded()) throw Error("--var " + v.substr(0, eq) + ": the value is not valid JSON");
    vars[v.substr(0, eq)] = std::move(value);
  }
  return vars;
}

// Renders with the command's variables and writes the prompt to stdout, byte for byte.
void print_chat_template(const ChatFormat& format, const ChatTemplateArgs& a) {
  const std::string prompt = format.render(template_variables(a), a.add_generation_prompt);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
}

}  // namespace

void add_chat_template(CLI::App& app) {
  auto a = std::make_shared<ChatTemplateArgs>();
  CLI::App* cmd = app.add_subcommand("chat-template", "render a chat template over a conversation and print the prompt");
  auto* model = cmd->add_option("-m,--model", a->model, "model file (.mmgpt): its tokenizer's chat template")
                    ->check(non_empty("path"));
  auto* tpl = cmd->add_option("--template", a->template_file,
                              "the template: a Jinja file, or a tokenizer_config.json holding chat_template")
                  ->check(non_empty("path"));
  model->excludes(tpl);
  cmd->add_option("--template-name", a->template_name,
                  "which of a tokenizer_config.json's named templates (default: \"default\")")
      ->check(non_empty("name"));
  cmd->add_option("--messages", a->messages_file,
                  "JSON file: a list of messages, or an object of template variables holding \"messages\"")
      ->required()
      ->check(non_empty("path"));
  cmd->add_flag("--add-generation-prompt", a->add_generation_prompt, "end with the header of the assistant's turn");
  auto* bos = cmd->add_option("--bos-token", a->bos_token, "the bos_token variable");
  auto* eos = cmd->add_option("--eos-token", a->eos_token, "the eos_token variable");
  cmd->add_option("--var", a->vars, "another template variable, NAME=JSON (repeatable)");
  cmd->callback([a, bos, eos, model, tpl]() {
    if (model->count() == 0 && tpl->count() == 0) throw Error("chat-template needs a template: -m MODEL or --template FILE");
    a->has_bos = bos->count() > 0;
    a->has_eos = eos->count() > 0;
    if (model->count() > 0) {
      // The model's own template, with the special tokens' text its tokenizer's files gave
      // (--bos-token and --eos-token still override them).
      const LanguageModel lm = LanguageModel::load(a->model);
      if (lm.tokenizer().chat_json().empty())
        throw Error(a->model + ": the model's tokenizer has no chat template (give one with --template FILE)");
      print_chat_template(ChatFormat::from_tokenizer(lm.tokenizer().chat_json(), a->model, a->template_name), *a);
      return;
    }
    const std::string text = read_file("--template", a->template_file);
    print_chat_template(ChatFormat::from_text(text, a->template_file, a->template_name), *a);
  });
}

}  // namespace mmgpt::cli
