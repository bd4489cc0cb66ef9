#pragma once
// The `mmgpt` subcommands. Each add_* registers its options on the app and a
// callback that does the work; errors are thrown as mmgpt::Error and turned
// into one line on stderr by main().
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mmgpt::cli {

void add_convert(CLI::App& app);
void add_generate(CLI::App& app);
void add_logits(CLI::App& app);
void add_inspect(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_detokenize(CLI::App& app);
void add_perplexity(CLI::App& app);
void add_bench(CLI::App& app);
void add_serve(CLI::App& app);
void add_chat_template(CLI::App& app);

// chat-template's renderer: compiles `source` (named `name` in errors), renders
// it with `variables` and writes the prompt to stdout exactly. A template
// read from a model file plugs in here.
void print_chat_template(std::string_view source, const std::string& name, const nlohmann::ordered_json& variables);

// What `mmgpt --version` prints: "mmgpt X.Y.Z" first, then the build's commit,
// compiler and kernels.
std::string version_text();

}  // namespace mmgpt::cli
