#pragma once
// The `mmgpt` subcommands. Each add_* registers its options on the app and a
// callback that does the work; errors are thrown as mmgpt::Error and turned
// into one line on stderr by main().
#include <CLI/CLI.hpp>
#include <string>

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
void add_chat(CLI::App& app);

// What `mmgpt --version` prints: "mmgpt X.Y.Z" first, then the build's commit,
// compiler and kernels.
std::string version_text();

}  // namespace mmgpt::cli
