// mmgpt tokenize / detokenize: text <-> token ids with a model's own tokenizer,
// exactly (detokenize writes back the very bytes tokenize was given).
#include <charconv>
#include <cstdio>
#include <memory>
#include <string>

#include "engine/mmgpt.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/input_file.hpp"
#include "tools/cli/token_ids.hpp"
#include "tools/cli/validate.hpp"

namespace mmgpt::cli {

namespace {

struct TokenizeArgs {
  std::string model, text, file, ids;
  bool no_special = false;
  bool add_special = false;
};

void run_tokenize(const TokenizeArgs& a) {
  // Loading maps the weights but reads none of them: only the tokenizer is touched.
  const LanguageModel lm = LanguageModel::load(a.model);
  const std::string text = a.file.empty() ? a.text : read_input_file(a.file, "text file");
  const std::vector<int32_t> ids = lm.encode(text, !a.no_special, a.add_special);
  std::string line;
  line.reserve(ids.size() * 6 + 1);
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line.push_back(' ');
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, ids[i]);
    line.append(buf, end);
  }
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stdout);
}

void run_detokenize(const TokenizeArgs& a) {
  const LanguageModel lm = LanguageModel::load(a.model);
  std::string text = a.ids;
  if (!a.file.empty()) text = read_input_file(a.file, "token id file");
  std::vector<int32_t> ids;
  // No ids at all is the empty text (what tokenize prints for it), not an error.
  if (text.find_first_not_of(" \t\r\n,") != std::string::npos) {
    try {
      ids = parse_token_ids(text, lm.config().vocab_size);
    } catch (const Error& e) {
      if (a.file.empty()) throw;
      throw Error(a.file + ": " + e.what());
    }
  }
  const std::string bytes = lm.decode(ids);
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
}

}  // namespace

void add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text, space-separated, on one line");
  cmd->add_option("-m,--model", a->model, "model file (.mmgpt)")->required()->check(non_empty("path"));
  auto* p = cmd->add_option("-p,--prompt", a->text, "the text");
  auto* f =
      cmd->add_option("-f,--file", a->file, "read the text from this file (its exact bytes)")->check(non_empty("path"));
  p->excludes(f);
  cmd->add_flag("--no-special", a->no_special,
                "treat special tokens' text (<|endoftext|>, ...) as plain text, not the special tokens");
  cmd->add_flag("--add-special", a->add_special,
                "add what the tokenizer adds around a text (a tokenizer.json's BOS, say), as Hugging Face's "
                "add_special_tokens does");
  cmd->callback([a, p, f]() {
    if (p->count() == 0 && f->count() == 0) throw Error("tokenize needs a text: -p TEXT or -f FILE");
    run_tokenize(*a);
  });
}

void add_detokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("detokenize", "write the exact bytes of token ids to stdout");
  cmd->add_option("-m,--model", a->model, "model file (.mmgpt)")->required()->check(non_empty("path"));
  auto* ids = cmd->add_option("--ids", a->ids, "token ids, e.g. \"1 2 3\"");
  auto* f = cmd->add_option("-f,--file", a->file, "read the token ids from this file")->check(non_empty("path"));
  ids->excludes(f);
  cmd->callback([a, ids, f]() {
    if (ids->count() == 0 && f->count() == 0) throw Error("detokenize needs token ids: --ids \"I J K\" or -f FILE");
    run_detokenize(*a);
  });
}

}  // namespace mmgpt::cli
