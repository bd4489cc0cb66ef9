// evaluate_perplexity against a straightforward re-implementation of the
// Hugging Face sliding-window loop (full window prefill, every row, naive
// log-softmax), plus window/stride accounting, defaults, validation and early
// stop. PyTorch parity lives in tests/reference/test_perplexity.py.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/executor.hpp"
#include "engine/perplexity.hpp"
#include "engine_test_model.hpp"
#include "formats/error.hpp"

using namespace mmgpt;
using test::random_ids;

namespace {

// -log p(target) from one logits row, written out the naive way.
double naive_nll(const float* row, size_t vocab, int32_t target) {
  double z = 0.0;
  for (size_t v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v]));
  return std::log(z) - row[target];
}

struct Expected {
  double mean_nll;
  size_t tokens, windows;
};

// The HF guide's loop, transcribed: for begin in range(0, N, stride): end =
// min(begin + ctx, N); trg_len = end - prev_end; labels = window with all but the
// last trg_len masked, then shifted by one inside the model.
Expected hf_reference(Executor& ex, const std::vector<int32_t>& ids, size_t ctx, size_t stride) {
  const size_t vocab = ex.model().config().vocab_size, n = ids.size();
  double sum = 0.0;
  size_t count = 0, windows = 0, prev_end = 0;
  for (size_t begin = 0; begin < n; begin += stride) {
    const size_t end = std::min(begin + ctx, n), trg_len = end - prev_end;
    std::vector<int32_t> window(ids.begin() + begin, ids.begin() + end);
    KVCache cache(ex.model().config());
    auto logits = ex.run(window, cache, window.size());
    size_t here = 0;
    for (size_t t = 1; t < window.size(); ++t) {  // label t is predicted by row t-1
      if (t < window.size() - trg_len) continue;  // masked (-100)
      sum += naive_nll(logits.data() + (t - 1) * vocab, vocab, window[t]);
      ++here;
    }
    count += here;
    windows += here > 0;
    prev_end = end;
    if (end == n) break;
  }
  return {sum / static_cast<double>(count), count, windows};
}

struct Fixture {
  ModelConfig cfg = test::small_config(2, 3, 30, 16, 37);
  std::shared_ptr<const Model> model;
  Fixture() {
    const std::string path = test::temp_path("engine_perplexity.mmgpt");
    test::write_random_model(path, cfg, 11, "", 0.4f);
    model = Model::load(path);
  }
};

}  // namespace

TEST_CASE("perplexity equals the Hugging Face sliding-window loop for every ctx/stride") {
  Fixture f;
  Executor ex(f.model);
  for (size_t n : {2, 5, 16, 17, 40, 61}) {
    auto ids = random_ids(n, f.cfg.vocab_size, n);
    for (size_t ctx : {2, 3, 8, 15, 16}) {
      for (size_t stride : {size_t{1}, size_t{2}, ctx / 2, ctx - 1, ctx}) {
        if (stride == 0) continue;
        CAPTURE(n);
        CAPTURE(ctx);
        CAPTURE(stride);
        PerplexityOptions opt;
        opt.ctx = ctx;
        opt.stride = stride;
        PerplexityResult got = evaluate_perplexity(ex, ids, opt);
        Expected want = hf_reference(ex, ids, ctx, stride);
        CHECK(got.tokens == want.tokens);
        CHECK(got.windows == want.windows);
        CHECK(got.mean_nll == doctest::Approx(want.mean_nll).epsilon(1e-6));
        CHECK(got.perplexity == doctest::Approx(std::exp(want.mean_nll)).epsilon(1e-6));
        // Scored tokens: all but the first with overlapping windows; with stride ==
        // ctx the first token of every window has no prediction.
        if (stride < ctx) CHECK(got.tokens == n - 1);
        if (stride == ctx) CHECK(got.tokens == n - (n + ctx - 1) / ctx);
      }
    }
  }
}

TEST_CASE("ctx 2, stride 1 scores each token from its predecessor alone") {
  Fixture f;
  Executor ex(f.model);
  auto ids = random_ids(25, f.cfg.vocab_size, 3);
  double sum = 0.0;
  for (size_t j = 1; j < ids.size(); ++j) {
    KVCache cache(f.cfg);
    std::vector<int32_t> one = {ids[j - 1]};
    sum += naive_nll(ex.run(one, cache, 1).data(), f.cfg.vocab_size, ids[j]);
  }
  PerplexityOptions opt;
  opt.ctx = 2;
  opt.stride = 1;
  PerplexityResult r = evaluate_perplexity(ex, ids, opt);
  CHECK(r.tokens == 24);
  CHECK(r.windows == 24);
  CHECK(r.mean_nll == doctest::Approx(sum / 24).epsilon(1e-6));
  CHECK(r.mean_nll > 0.0);
  CHECK(r.tokens_per_second > 0.0);
}

TEST_CASE("defaults: ctx = the context length, stride = ctx / 2") {
  Fixture f;
  Executor ex(f.model);
  auto ids = random_ids(40, f.cfg.vocab_size, 5);
  PerplexityResult def = evaluate_perplexity(ex, ids, {});
  // n_ctx 16, stride 8: windows start at 0, 8, 16, 24 (the last ends at 40).
  CHECK(def.windows == 4);
  CHECK(def.tokens == 39);
  PerplexityOptions explicit_opt;
  explicit_opt.ctx = 16;
  explicit_opt.stride = 8;
  CHECK(evaluate_perplexity(ex, ids, explicit_opt).mean_nll == def.mean_nll);
}

TEST_CASE("progress sees every window and can stop early") {
  Fixture f;
  Executor ex(f.model);
  auto ids = random_ids(50, f.cfg.vocab_size, 8);
  PerplexityOptions opt;
  opt.ctx = 10;
  opt.stride = 5;
  std::vector<std::pair<size_t, size_t>> calls;
  PerplexityResult all = evaluate_perplexity(ex, ids, opt, [&](size_t done, size_t total) {
    calls.emplace_back(done, total);
    return true;
  });
  REQUIRE(calls.size() == all.windows);
  CHECK(calls.front().first == 9);  // the first window scores its tokens 1..9
  CHECK(calls.back().first == 49);
  for (size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i].second == 49);
    if (i > 0) CHECK(calls[i].first == calls[i - 1].first + 5);
  }

  size_t seen = 0;
  PerplexityResult part = evaluate_perplexity(ex, ids, opt, [&](size_t, size_t) { return ++seen < 2; });
  CHECK(part.windows == 2);
  CHECK(part.tokens == 14);
  // The first two windows alone, scored over a text that ends where the second window does.
  std::vector<int32_t> prefix(ids.begin(), ids.begin() + 15);
  CHECK(part.mean_nll == doctest::Approx(hf_reference(ex, prefix, 10, 5).mean_nll).epsilon(1e-6));
}

TEST_CASE("bad ctx, stride, too-short text and bad ids are one-line errors") {
  Fixture f;
  Executor ex(f.model);
  auto ids = random_ids(20, f.cfg.vocab_size, 1);
  auto with = [](size_t ctx, size_t stride) {
    PerplexityOptions o;
    o.ctx = ctx;
    o.stride = stride;
    return o;
  };
  CHECK_THROWS_WITH_AS(evaluate_perplexity(ex, ids, with(1, 1)), doctest::Contains("ctx 1 must be between 2"), Error);
  CHECK_THROWS_WITH_AS(evaluate_perplexity(ex, ids, with(17, 1)), doctest::Contains("context length 16"), Error);
  CHECK_THROWS_WITH_AS(evaluate_perplexity(ex, ids, with(8, 9)), doctest::Contains("stride 9"), Error);
  std::vector<int32_t> one = {3}, none;
  CHECK_THROWS_WITH_AS(evaluate_perplexity(ex, one, {}), doctest::Contains("at least 2 tokens"), Error);
  CHECK_THROWS_AS(evaluate_perplexity(ex, none, {}), Error);
  ids[13] = static_cast<int32_t>(f.cfg.vocab_size);
  CHECK_THROWS_WITH_AS(evaluate_perplexity(ex, ids, {}), doctest::Contains("position 13"), Error);
  ids[13] = -4;
  CHECK_THROWS_AS(evaluate_perplexity(ex, ids, {}), Error);
}

TEST_CASE("divergence from a base model: zero against itself, the KL of the rows otherwise, mismatches refused") {
  Fixture f;
  Executor ex(f.model), same(f.model);
  auto ids = random_ids(40, f.cfg.vocab_size, 6);
  PerplexityOptions opt;
  opt.ctx = 8;
  opt.stride = 8;
  DivergenceResult d;
  const PerplexityResult r = evaluate_perplexity(ex, same, ids, opt, d);
  CHECK(r.mean_nll == evaluate_perplexity(ex, ids, opt).mean_nll);
  CHECK(d.base_mean_nll == r.mean_nll);
  CHECK(d.mean_kl == 0.0);
  CHECK(d.max_kl == 0.0);
  CHECK(d.same_top1 == 1.0);

  // Another model of the same shape: KL(P_base || P_model) per scored row, from
  // the logits of the very windows perplexity runs (ctx 8, stride 8: rows 0..6
  // of each window predict its tokens 1..7).
  const std::string other_path = test::temp_path("perplexity_other.mmgpt");
  test::write_random_model(other_path, f.cfg, 12, "", 0.4f);
  Executor other(Model::load(other_path));
  DivergenceResult d2;
  evaluate_perplexity(ex, other, ids, opt, d2);
  const size_t V = f.cfg.vocab_size;
  double kl_sum = 0, kl_max = 0;
  size_t rows = 0, same_top = 0;
  for (size_t b = 0; b + 1 < ids.size(); b += 8) {
    const size_t e = std::min(b + 8, ids.size());
    std::vector<int32_t> in(ids.begin() + b, ids.begin() + e - 1);
    KVCache c1(f.cfg), c2(f.cfg);
    auto q = ex.run(in, c1, in.size());
    std::vector<float> qv(q.begin(), q.end());
    auto p = other.run(in, c2, in.size());
    for (size_t t = 0; t < in.size(); ++t, ++rows) {
      const float* pr = p.data() + t * V;
      const float* qr = qv.data() + t * V;
      const double pm = *std::max_element(pr, pr + V), qm = *std::max_element(qr, qr + V);
      double zp = 0, zq = 0;
      for (size_t v = 0; v < V; ++v) zp += std::exp(pr[v] - pm), zq += std::exp(qr[v] - qm);
      double kl = 0;
      for (size_t v = 0; v < V; ++v) {
        const double lp = pr[v] - pm - std::log(zp), lq = qr[v] - qm - std::log(zq);
        kl += std::exp(lp) * (lp - lq);
      }
      kl_sum += kl;
      kl_max = std::max(kl_max, kl);
      same_top += (std::max_element(pr, pr + V) - pr) == (std::max_element(qr, qr + V) - qr);
    }
  }
  REQUIRE(rows == r.tokens);
  CHECK(d2.mean_kl == doctest::Approx(kl_sum / rows).epsilon(1e-9));
  CHECK(d2.max_kl == doctest::Approx(kl_max).epsilon(1e-9));
  CHECK(d2.same_top1 == doctest::Approx(double(same_top) / rows));
  CHECK(d2.mean_kl > 0);

  // A base with another vocabulary is refused.
  ModelConfig wider = f.cfg;
  wider.vocab_size += 1;
  const std::string wide_path = test::temp_path("perplexity_wide.mmgpt");
  test::write_random_model(wide_path, wider, 3, "", 0.4f);
  Executor wide(Model::load(wide_path));
  DivergenceResult d3;
  CHECK_THROWS_WITH_AS(evaluate_perplexity(ex, wide, ids, opt, d3), doctest::Contains("vocabulary"), Error);
}
