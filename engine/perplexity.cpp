// Perplexity over sliding windows: the method of Hugging Face's "Perplexity
// of fixed-length models" guide (huggingface.co/docs/transformers/perplexity).
//
// Definition. Given tokens x_0 .. x_{N-1}, a window length C (2 <= C <= n_ctx)
// and a stride S (1 <= S <= C):
//   * window k covers tokens [b_k, e_k) with b_k = k*S and e_k = min(b_k + C, N);
//     the last window is the first one with e_k == N (it may be shorter than C);
//   * each window starts from an empty KV cache, so the model sees positions
//     0 .. e_k-b_k-1 and nothing before b_k;
//   * a window scores only the tokens no earlier window scored: targets are
//     x_j for max(e_{k-1}, b_k + 1) <= j < e_k (e_{-1} = 0). Row t of a window's
//     logits predicts its token t+1, so the window's first token is never a
//     target in it: the first window scores x_1 .. x_{e_0-1}, and with S == C
//     the first token of every window goes unscored (exactly as in the HF code,
//     whose labels are shifted by one inside the model).
//   * a window with no target (only possible when S == C leaves a last window
//     of one token) is not run and not counted.
//   * NLL_j = -log softmax(logits row predicting x_j)[x_j], in double;
//     mean_nll = (sum of NLL_j) / (number of targets), perplexity = exp(mean_nll).
// With S < C every token but x_0 is scored, each with at least C - S tokens of
// context (except near the start); S == C is fastest but scores tokens at a
// window start with no context at all.
//
// The default stride is C/2 (at least 1): every prediction then sees at least
// half a window of context, at twice the cost of S == C.
//
// Divergence from a base model (evaluate_perplexity with `base`): on each
// target row, P = softmax(base logits), Q = softmax(model logits) in double,
// KL(P || Q) = sum_v P_v (log P_v - log Q_v); reported as the mean and maximum
// over the targets, with the fraction of targets whose argmax agrees (ties
// go to the lowest id). The base model's own NLL on the same targets is
// reported too, so "perplexity within x% of the base" is one division.
//
// Only what is needed is run: a window's last token is never fed (its logits
// would predict a token outside the window), and the executor is asked for just
// the rows of the targets. tokens_per_second counts the tokens fed through the
// model (sum over windows of e_k - b_k - 1).
#include "engine/perplexity.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>

#include "engine/executor.hpp"
#include "engine/kv_cache.hpp"
#include "formats/error.hpp"

namespace mmgpt {

namespace {

// -log softmax(row)[target], via a log-sum-exp in double around the row's maximum
// (float accumulation over a 50k vocabulary would cost ~1e-5 relative).
double token_nll(std::span<const float> row, int32_t target) {
  const float mx = *std::max_element(row.begin(), row.end());
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
  return std::log(sum) + mx - static_cast<double>(row[static_cast<size_t>(target)]);
}

// log-sum-exp of a row, in double around its maximum.
double log_sum_exp(std::span<const float> row) {
  const float mx = *std::max_element(row.begin(), row.end());
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
  return std::log(sum) + mx;
}

// KL(softmax(p) || softmax(q)) for two logit rows of one vocabulary.
double row_kl(std::span<const float> p, std::span<const float> q) {
  const double lp = log_sum_exp(p), lq = log_sum_exp(q);
  double kl = 0.0;
  for (size_t v = 0; v < p.size(); ++v) {
    const double a = static_cast<double>(p[v]) - lp, b = static_cast<double>(q[v]) - lq;
    kl += std::exp(a) * (a - b);
  }
  return std::max(kl, 0.0);  // rounding can leave -1e-17 for identical rows
}

struct Window {
  size_t begin, end;  // tokens [begin, end)
  size_t targets;     // the last `targets` tokens of the window are scored
};

std::vector<Window> plan_windows(size_t n, size_t ctx, size_t stride) {
  std::vector<Window> windows;
  size_t prev_end = 0;
  for (size_t begin = 0; begin < n; begin += stride) {
    const size_t end = std::min(begin + ctx, n);  // begin < n and ctx <= n_ctx: no overflow
    const size_t first = std::max(prev_end, begin + 1);
    if (end > first) windows.push_back({begin, end, end - first});
    prev_end = end;
    if (end == n) break;
  }
  return windows;
}

}  // namespace

namespace {

PerplexityResult evaluate(Executor& executor, Executor* base, std::span<const int32_t> tokens,
                          const PerplexityOptions& options, DivergenceResult* divergence,
                          const PerplexityProgress& progress) {
  const ModelConfig& config = executor.model().config();
  const size_t n_ctx = config.n_ctx;
  const size_t ctx = options.ctx == 0 ? n_ctx : options.ctx;
  if (ctx < 2 || ctx > n_ctx)
    throw Error("perplexity: ctx " + std::to_string(ctx) + " must be between 2 and the context length " +
                std::to_string(n_ctx));
  const size_t stride = options.stride == 0 ? std::max<size_t>(1, ctx / 2) : options.stride;
  if (stride > ctx)
    throw Error("perplexity: stride " + std::to_string(stride) + " must be between 1 and ctx " + std::to_string(ctx));
  if (tokens.size() < 2) throw Error("perplexity: needs at least 2 tokens, got " + std::to_string(tokens.size()));
  const size_t vocab = config.vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i)  // checked up front: no error after minutes of work
    if (tokens[i] < 0 || static_cast<uint64_t>(tokens[i]) >= vocab)
      throw Error("perplexity: token id " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary (0.." + std::to_string(vocab - 1) + ")");

  if (base) {
    const ModelConfig& bc = base->model().config();
    if (bc.vocab_size != vocab)
      throw Error("perplexity: the base model's vocabulary (" + std::to_string(bc.vocab_size) +
                  " tokens) differs from the model's (" + std::to_string(vocab) + ")");
    if (bc.n_ctx < ctx)
      throw Error("perplexity: the base model's context length " + std::to_string(bc.n_ctx) +
                  " is shorter than the window " + std::to_string(ctx));
  }

  const std::vector<Window> plan = plan_windows(tokens.size(), ctx, stride);
  const size_t w0 = std::min(options.window_begin, plan.size());
  const size_t w1 = std::max(w0, std::min(options.window_end, plan.size()));
  const std::span<const Window> windows = std::span(plan).subspan(w0, w1 - w0);
  size_t total = 0;
  for (const Window& w : windows) total += w.targets;

  const auto t0 = std::chrono::steady_clock::now();
  KVCache cache(config, options.kv_dtype);
  std::unique_ptr<KVCache> base_cache = base ? std::make_unique<KVCache>(base->model().config()) : nullptr;
  double nll_sum = 0.0, base_nll_sum = 0.0, kl_sum = 0.0, kl_max = 0.0;
  size_t same_top1 = 0;
  size_t scored = 0, fed = 0;
  PerplexityResult result;
  for (const Window& w : windows) {
    cache.clear();
    // Feed tokens [begin, end-1): the row for the token at end-1-r predicts the one at end-r.
    std::span<const int32_t> input = tokens.subspan(w.begin, w.end - 1 - w.begin);
    std::span<const float> logits = executor.run(input, cache, w.targets);
    const size_t first = w.end - w.targets;
    for (size_t r = 0; r < w.targets; ++r) nll_sum += token_nll(logits.subspan(r * vocab, vocab), tokens[first + r]);
    if (base) {
      base_cache->clear();
      std::span<const float> base_logits = base->run(input, *base_cache, w.targets);
      for (size_t r = 0; r < w.targets; ++r) {
        const auto p = base_logits.subspan(r * vocab, vocab), q = logits.subspan(r * vocab, vocab);
        base_nll_sum += token_nll(p, tokens[first + r]);
        const double kl = row_kl(p, q);
        kl_sum += kl;
        kl_max = std::max(kl_max, kl);
        same_top1 +=
            std::max_element(p.begin(), p.end()) - p.begin() == std::max_element(q.begin(), q.end()) - q.begin();
      }
    }
    scored += w.targets;
    fed += input.size();
    ++result.windows;
    if (progress && !progress(scored, total)) break;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.tokens = scored;
  result.ctx = ctx;
  result.stride = stride;
  result.windows_planned = plan.size();
  result.nll_sum = nll_sum;
  // scored >= 1 unless the range held no window: every planned window has a target
  result.mean_nll = scored ? nll_sum / static_cast<double>(scored) : 0.0;
  result.perplexity = std::exp(result.mean_nll);
  result.tokens_per_second = result.seconds > 0.0 ? static_cast<double>(fed) / result.seconds : 0.0;
  if (base && divergence) {
    const double n = static_cast<double>(scored);
    divergence->base_mean_nll = base_nll_sum / n;
    divergence->base_perplexity = std::exp(divergence->base_mean_nll);
    divergence->mean_kl = kl_sum / n;
    divergence->max_kl = kl_max;
    divergence->same_top1 = static_cast<double>(same_top1) / n;
  }
  return result;
}

}  // namespace

PerplexityResult evaluate_perplexity(Executor& executor, std::span<const int32_t> tokens,
                                     const PerplexityOptions& options, const PerplexityProgress& progress) {
  return evaluate(executor, nullptr, tokens, options, nullptr, progress);
}

PerplexityResult evaluate_perplexity(Executor& executor, Executor& base, std::span<const int32_t> tokens,
                                     const PerplexityOptions& options, DivergenceResult& divergence,
                                     const PerplexityProgress& progress) {
  return evaluate(executor, &base, tokens, options, &divergence, progress);
}

}  // namespace mmgpt
