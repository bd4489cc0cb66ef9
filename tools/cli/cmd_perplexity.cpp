// mmgpt perplexity: mean negative log-likelihood and perplexity of a text file
// under the model, over sliding windows (definition in engine/perplexity.cpp).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include <tbb/global_control.h>
#include <nlohmann/json.hpp>

#include "engine/mmgpt.hpp"
#include "formats/error.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/input_file.hpp"
#include "tools/cli/validate.hpp"

namespace mmgpt::cli {

namespace {

struct PerplexityArgs {
  std::string model, file;
  std::string kl_base;  // --kl-base: a base model to compare the distributions with
  std::string kv_dtype = "f32";
  size_t ctx = 0, stride = 0;
  bool ctx_given = false, stride_given = false;  // an explicit 0 is an error, not "the default"
  int threads = 0;
  bool no_special = false;
  bool json = false;
};

// One self-overwriting line on stderr, only for a person watching a terminal;
// redrawn at most ten times a second and erased when done.
class ProgressLine {
 public:
  ProgressLine() : enabled_(isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}
  ~ProgressLine() { clear(); }

  void update(size_t done, size_t total) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\rperplexity: %5.1f%%  %zu/%zu tokens scored  %.0f scored/s\033[K",
                 total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0, done, total,
                 secs > 0 ? static_cast<double>(done) / secs : 0.0);
    std::fflush(stderr);
    drawn_ = true;
  }

  void clear() {
    if (!drawn_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    drawn_ = false;
  }

 private:
  bool enabled_, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_{};
};

void run_perplexity(const PerplexityArgs& a) {
  std::unique_ptr<tbb::global_control> threads;
  if (a.threads > 0)
    threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, a.threads);

  LanguageModel lm = LanguageModel::load(a.model);
  // The ranges, checked here to name the option (count() checked only that they are whole numbers).
  const size_t n_ctx = lm.config().n_ctx;
  if (a.ctx_given && (a.ctx < 2 || a.ctx > n_ctx))
    throw Error("--ctx " + std::to_string(a.ctx) + " must be between 2 and the model's context length " +
                std::to_string(n_ctx));
  const size_t ctx = a.ctx_given ? a.ctx : n_ctx;
  if (a.stride_given && (a.stride < 1 || a.stride > ctx))
    throw Error("--stride " + std::to_string(a.stride) + " must be between 1 and the window length " +
                std::to_string(ctx) + (a.ctx_given ? " (--ctx)" : " (the model's context length)"));

  const std::string text = read_input_file(a.file, "text file");
  if (text.empty()) throw Error("-f: " + a.file + " is empty");
  std::vector<int32_t> tokens;
  try {
    tokens = lm.encode(text, !a.no_special);
  } catch (const Error& e) {
    throw Error(a.file + ": " + e.what());
  }
  if (tokens.size() < 2)
    throw Error(a.file + ": " + std::to_string(tokens.size()) + " token(s); perplexity needs at least 2");

  std::optional<LanguageModel> base;
  if (!a.kl_base.empty()) {
    base.emplace(LanguageModel::load(a.kl_base));
    if (base->config().vocab_size != lm.config().vocab_size)
      throw Error("--kl-base " + a.kl_base + ": vocabulary of " + std::to_string(base->config().vocab_size) +
                  " tokens, the model has " + std::to_string(lm.config().vocab_size));
    if (base->config().n_ctx < ctx)
      throw Error("--kl-base " + a.kl_base + ": context length " + std::to_string(base->config().n_ctx) +
                  " is shorter than the window " + std::to_string(ctx));
    // The same ids must mean the same text, or the comparison is meaningless.
    std::vector<int32_t> base_tokens;
    try {
      base_tokens = base->encode(text, !a.no_special);
    } catch (const Error& e) {
      throw Error("--kl-base " + a.kl_base + ": " + e.what());
    }
    if (base_tokens != tokens)
      throw Error("--kl-base " + a.kl_base + ": its tokenizer encodes " + a.file + " differently from the model's");
  }

  PerplexityOptions options;
  options.ctx = a.ctx_given ? a.ctx : 0;
  options.stride = a.stride_given ? a.stride : 0;
  options.kv_dtype = parse_kv_dtype(a.kv_dtype);
  PerplexityResult r;
  DivergenceResult div;
  {
    ProgressLine progress;
    auto on_progress = [&](size_t done, size_t total) {
      progress.update(done, total);
      return true;
    };
    r = base ? lm.perplexity(tokens, options, *base, div, on_progress) : lm.perplexity(tokens, options, on_progress);
  }

  if (a.json) {
    nlohmann::json j = {{"model", a.model},
                        {"file", a.file},
                        {"ctx", r.ctx},
                        {"kv_dtype", a.kv_dtype},
                        {"stride", r.stride},
                        {"mean_nll", r.mean_nll},
                        {"perplexity", r.perplexity},
                        {"tokens", r.tokens},
                        {"windows", r.windows},
                        {"seconds", r.seconds},
                        {"tokens_per_second", r.tokens_per_second}};
    if (base)
      j["kl_base"] = {{"model", a.kl_base},
                      {"mean_nll", div.base_mean_nll},
                      {"perplexity", div.base_perplexity},
                      {"perplexity_ratio", r.perplexity / div.base_perplexity},
                      {"mean_kl", div.mean_kl},
                      {"max_kl", div.max_kl},
                      {"same_top1", div.same_top1}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("mean_nll %.4f nats  perplexity %.4f  tokens %zu  windows %zu  ctx %zu  stride %zu  tokens/s %.1f\n",
                r.mean_nll, r.perplexity, r.tokens, r.windows, r.ctx, r.stride, r.tokens_per_second);
    if (base)
      std::printf("base perplexity %.4f (model/base %+.3f%%)  mean KL %.3g nats  max KL %.3g  same top-1 %.2f%%\n",
                  div.base_perplexity, 100.0 * (r.perplexity / div.base_perplexity - 1.0), div.mean_kl, div.max_kl,
                  100.0 * div.same_top1);
  }
  std::fflush(stdout);
}

}  // namespace

void add_perplexity(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity",
      "score a text file: mean negative log-likelihood (nats per token) and perplexity over sliding windows");
  cmd->add_option("-m,--model", a->model, "model file (.mmgpt)")->required()->check(non_empty("path"));
  cmd->add_option("-f,--file", a->file, "text file, read as raw bytes and encoded with the model's tokenizer")
      ->required()
      ->check(non_empty("path"));
  cmd->add_option("--ctx", a->ctx, "window length in tokens, 2..context length (default: the model's context length)")
      ->check(count(0, UINT32_MAX))
      ->each([a](const std::string&) { a->ctx_given = true; });
  cmd->add_option("--stride", a->stride,
                  "tokens each window advances by, 1..ctx; each window scores only the tokens no earlier window "
                  "scored (default: ctx/2)")
      ->check(count(0, UINT32_MAX))
      ->each([a](const std::string&) { a->stride_given = true; });
  cmd->add_option("--threads", a->threads, "worker threads (default: all cores)")->check(thread_count());
  add_kv_dtype_option(cmd, a->kv_dtype);
  cmd->add_flag("--no-special", a->no_special,
                "encode \"<|endoftext|>\" in the text as plain text, not the special token");
  cmd->add_option("--kl-base", a->kl_base,
                  "also run this model (e.g. the f32 original of a quantized model) on the same windows and report "
                  "its perplexity and the KL divergence of the next-token distributions from it")
      ->check(non_empty("path"));
  cmd->add_flag("--json", a->json, "print the result as JSON");
  cmd->callback([a]() { run_perplexity(*a); });
}

}  // namespace mmgpt::cli
