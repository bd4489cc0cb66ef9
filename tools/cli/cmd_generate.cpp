// mmgpt generate: prompt (text or ids) -> continuation, streamed to stdout.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>

#include <tbb/global_control.h>

#include "engine/executor.hpp"
#include "engine/generator.hpp"
#include "engine/model.hpp"
#include "engine/tokenizer.hpp"
#include "formats/error.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/token_ids.hpp"

namespace mmgpt::cli {

namespace {

struct GenerateArgs {
  std::string model, prompt, ids;
  size_t n = 256;
  bool greedy = false;
  float temperature = 0.8f;
  uint32_t top_k = 200;
  uint64_t seed = 0;
  bool seed_given = false;
  int threads = 0;
  bool ignore_eos = false;
  bool print_ids = false;
};

void run_generate(const GenerateArgs& a) {
  std::unique_ptr<tbb::global_control> threads;
  if (a.threads > 0)
    threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, a.threads);

  auto model = Model::load(a.model);
  const ModelConfig& config = model->config();
  Tokenizer tokenizer(model->tokenizer_data());

  std::vector<int32_t> prompt;
  if (!a.ids.empty()) {
    prompt = parse_token_ids(a.ids, config.vocab_size);
  } else {
    if (a.prompt.empty()) throw Error("-p: the prompt is empty");
    prompt = tokenizer.encode(a.prompt);
  }
  if (prompt.size() > config.n_ctx) {
    std::cerr << "mmgpt generate: note: the prompt has " << prompt.size() << " tokens; using its last " << config.n_ctx
              << " (the context length)\n";
    prompt.erase(prompt.begin(), prompt.end() - config.n_ctx);
  }

  const bool as_ids = a.print_ids || tokenizer.kind() == TokenizerKind::None;
  if (tokenizer.kind() == TokenizerKind::None && !a.print_ids)
    std::cerr << "mmgpt generate: note: " << a.model << " has no tokenizer; printing token ids\n";

  GenerateOptions options;
  options.max_new_tokens = a.n;
  options.ignore_eos = a.ignore_eos;
  options.eos_id = tokenizer.eos_id();
  options.sampling.greedy = a.greedy;
  options.sampling.temperature = a.temperature;
  options.sampling.top_k = a.top_k;
  options.sampling.seed = a.seed_given ? a.seed : std::random_device{}();

  Executor executor(model);
  Utf8Stream stream;
  bool first = true;
  if (!as_ids) {
    std::string echo = a.ids.empty() ? a.prompt : tokenizer.decode(prompt);
    std::fwrite(echo.data(), 1, echo.size(), stdout);
    std::fflush(stdout);
  }
  generate(executor, prompt, options, [&](int32_t token) {
    if (as_ids) {
      std::printf(first ? "%d" : " %d", token);
      first = false;
    } else {
      std::string text = stream.push(tokenizer.token_bytes(token));
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    std::fflush(stdout);
    return true;
  });
  if (!as_ids) {
    std::string rest = stream.flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace

void add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt");
  cmd->add_option("-m,--model", a->model, "model file (.mmgpt)")->required();
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "prompt text");
  auto* ids = cmd->add_option("--ids", a->ids, "prompt as token ids, e.g. \"1 2 3\"");
  p->excludes(ids);
  cmd->add_option("-n,--n-tokens", a->n, "number of tokens to generate")->check(CLI::Range(size_t{0}, size_t{1} << 24));
  auto* greedy = cmd->add_flag("--greedy", a->greedy, "always pick the most likely token");
  auto* temp = cmd->add_option("--temperature", a->temperature, "sampling temperature (> 0; default 0.8)");
  auto* topk = cmd->add_option("--top-k", a->top_k, "sample among the K most likely tokens (0 = all; default 200)");
  greedy->excludes(temp)->excludes(topk);
  cmd->add_option("--seed", a->seed, "random seed: the same seed repeats a run exactly")
      ->each([a](const std::string&) { a->seed_given = true; });
  cmd->add_option("--threads", a->threads, "worker threads (default: all cores)")->check(CLI::Range(1, 4096));
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating past the end-of-text token");
  cmd->add_flag("--print-ids", a->print_ids, "print only the generated token ids, space-separated, on one line");
  cmd->callback([a, p, ids]() {
    if (p->count() == 0 && ids->count() == 0) throw Error("generate needs a prompt: -p TEXT or --ids \"I J K\"");
    if (!(std::isfinite(a->temperature) && a->temperature > 0.0f))
      throw Error("--temperature must be a finite number greater than 0, got " + std::to_string(a->temperature));
    run_generate(*a);
  });
}

}  // namespace mmgpt::cli
