// Log-probabilities (engine/logprobs.hpp): of generated tokens, of a prompt's
// tokens and of a scored continuation. Each value is the log-softmax of the
// logit row LanguageModel::logits gives for that position, bit for bit, since
// a row's logits never depend on how the steps were split or batched.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/mmgpt.hpp"
#include "engine/scheduler.hpp"
#include "engine_test_model.hpp"

using namespace mmgpt;
using namespace std::chrono_literals;

namespace {

const std::string kAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?'\n-()0123";

LanguageModel test_model(uint32_t n_ctx = 128) {
  const std::string path = test::temp_path("logprobs-" + std::to_string(n_ctx) + ".mmgpt");
  ModelConfig cfg = test::small_config(/*n_layer=*/2, /*n_head=*/4, /*n_embd=*/64, n_ctx,
                                       static_cast<uint32_t>(kAlphabet.size()));
  test::write_random_model(path, cfg, 23, kAlphabet, 0.3f, /*eos_id=*/-1, Layout::Panel16);
  return LanguageModel::load(path);
}

// The reference: log_softmax in long double, and the top tokens by a full sort.
std::vector<long double> log_softmax(std::span<const float> row) {
  const long double m = *std::max_element(row.begin(), row.end());
  long double s = 0;
  for (float x : row) s += std::exp(static_cast<long double>(x) - m);
  std::vector<long double> out;
  for (float x : row) out.push_back(static_cast<long double>(x) - m - std::log(s));
  return out;
}

// Checks `p` against the reference for `row`: the value within a float rounding, the top list exactly.
void check_position(const PositionLogprobs& p, std::span<const float> row, int32_t token, size_t top) {
  CHECK(p.token == token);
  const std::vector<long double> ref = log_softmax(row);
  CHECK(std::abs(p.logprob - static_cast<double>(ref[static_cast<size_t>(token)])) <= 2e-6 * (1 + std::abs(p.logprob)));
  std::vector<int32_t> order(row.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  CHECK(p.greedy == (token == order[0]));
  REQUIRE(p.top.size() == std::min(top, row.size()));
  for (size_t i = 0; i < p.top.size(); ++i) {
    CHECK(p.top[i].token == order[i]);
    CHECK(p.top[i].logprob == position_logprobs(row, order[i], 0).logprob);
  }
}

std::vector<int32_t> joined(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  return all;
}

}  // namespace

TEST_CASE("position_logprobs: the log-softmax of a row, its top tokens by logit then id") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{50}, size_t{1000}}) {
    std::vector<float> row(n);
    for (float& x : row) x = normal(rng);
    if (n >= 7) row[1] = row[4] = row[6] = *std::max_element(row.begin(), row.end());  // ties at the top
    if (n >= 50) row[10] = row[20] = -80.0f;
    for (size_t top : {size_t{0}, size_t{1}, size_t{5}, kMaxTopLogprobs}) {
      CAPTURE(n);
      CAPTURE(top);
      for (size_t t = 0; t < n; t += std::max<size_t>(1, n / 9))
        check_position(position_logprobs(row, static_cast<int32_t>(t), top), row, static_cast<int32_t>(t), top);
    }
  }
  // Extreme spreads stay finite; probabilities add up to one.
  std::vector<float> wide = {1e30f, -1e30f, 0.0f, 88.0f, -88.0f};
  CHECK(position_logprobs(wide, 0, 0).logprob == 0.0f);
  CHECK(std::isfinite(position_logprobs(wide, 1, 0).logprob));
  std::vector<float> row(300);
  for (float& x : row) x = normal(rng);
  double total = 0;
  for (const TokenLogprob& t : position_logprobs(row, 0, 300).top) total += std::exp(double(t.logprob));
  CHECK(total == doctest::Approx(1.0).epsilon(1e-6));
  CHECK_THROWS_WITH_AS(position_logprobs(row, 300, 0), doctest::Contains("outside"), Error);
}

TEST_CASE("generated tokens' log-probabilities are those of the logits at their positions") {
  const LanguageModel lm = test_model();
  const std::vector<int32_t> prompt = lm.encode("ROMEO: the");
  for (bool greedy : {true, false}) {
    GenerateOptions o;
    o.max_new_tokens = 12;
    o.ignore_eos = true;
    o.sampling.greedy = greedy;
    o.sampling.temperature = 1.3f;
    o.sampling.top_k = 8;
    o.sampling.seed = 41;
    const GenerationResult plain = lm.generate(prompt, o);
    o.logprobs = true;
    o.top_logprobs = 5;
    const GenerationResult r = lm.generate(prompt, o);
    CAPTURE(greedy);
    CHECK(r.tokens == plain.tokens);  // asking for log-probabilities changes nothing that is sampled
    CHECK(r.prompt_logprobs.empty());
    REQUIRE(r.logprobs.size() == r.tokens.size());
    const std::vector<float> logits = lm.logits(joined(prompt, r.tokens));
    const size_t vocab = lm.config().vocab_size;
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      const std::span<const float> row(logits.data() + (prompt.size() - 1 + i) * vocab, vocab);
      check_position(r.logprobs[i], row, r.tokens[i], 5);
      CHECK(r.logprobs[i].logprob == position_logprobs(row, r.tokens[i], 0).logprob);  // the same bits
      if (greedy) CHECK(r.logprobs[i].greedy);
    }
  }
}

TEST_CASE("a prompt's log-probabilities, scored alone or before generating, whole or in chunks") {
  const LanguageModel lm = test_model();
  const std::vector<int32_t> prompt = lm.encode("Hello there, a prompt of some forty tokens to be scored.");
  REQUIRE(prompt.size() > 40);
  const std::vector<float> logits = lm.logits(prompt);
  const size_t vocab = lm.config().vocab_size;
  for (size_t chunk : {size_t{0}, size_t{1}, size_t{7}}) {
    for (size_t new_tokens : {size_t{0}, size_t{3}}) {
      CAPTURE(chunk);
      CAPTURE(new_tokens);
      GenerateOptions o;
      o.max_new_tokens = new_tokens;
      o.prefill_chunk = chunk;
      o.prompt_logprobs = true;
      o.top_logprobs = 3;
      o.sampling.greedy = true;
      o.ignore_eos = true;
      const GenerationResult r = lm.generate(prompt, o);
      CHECK(r.tokens.size() == new_tokens);
      REQUIRE(r.prompt_logprobs.size() == prompt.size() - 1);
      for (size_t i = 0; i + 1 < prompt.size(); ++i) {
        const std::span<const float> row(logits.data() + i * vocab, vocab);
        CHECK(r.prompt_logprobs[i].logprob == position_logprobs(row, prompt[i + 1], 0).logprob);
        check_position(r.prompt_logprobs[i], row, prompt[i + 1], 3);
      }
      if (new_tokens > 0) {
        GenerateOptions plain = o;
        plain.prompt_logprobs = false;
        CHECK(lm.generate(prompt, plain).tokens == r.tokens);
      }
    }
  }
  // A one-token prompt has nothing to score.
  GenerateOptions o;
  o.max_new_tokens = 0;
  o.prompt_logprobs = true;
  CHECK(lm.generate(std::vector<int32_t>{prompt[0]}, o).prompt_logprobs.empty());
}

TEST_CASE("the scheduler: prompt log-probabilities ignore the prefix cache, rows of mixed steps stay apart") {
  const LanguageModel lm = test_model();
  SchedulerOptions so;
  so.max_running = 3;
  so.prefill_chunk = 5;
  so.prefix_cache = 2;
  Scheduler scheduler(lm, so);
  const std::vector<int32_t> a = lm.encode("You are a helpful assistant. Say");
  const std::vector<int32_t> b = lm.encode("You are a helpful assistant. Say something long");
  GenerateOptions g;
  g.max_new_tokens = 10;
  g.sampling.seed = 3;
  g.ignore_eos = true;
  g.logprobs = true;
  g.top_logprobs = 2;
  auto wait = [](Job& job) {
    for (;;) {
      JobUpdate u = job.wait(1000ms);
      if (u.finished) {
        REQUIRE(u.error.empty());
        return u.result;
      }
    }
  };
  const GenerationResult first = wait(*scheduler.submit(a, g));
  // b shares a's prefix, and is scored while another sequence decodes beside it.
  GenerateOptions scored = g;
  scored.prompt_logprobs = true;
  auto busy = scheduler.submit(lm.encode("xyz"), g);
  auto job = scheduler.submit(b, scored);
  const GenerationResult rb = wait(*job);
  const GenerationResult rbusy = wait(*busy);
  CHECK(job->cached_prompt_tokens() == 0);
  const GenerationResult alone = lm.generate(b, scored);
  CHECK(rb.tokens == alone.tokens);
  REQUIRE(rb.prompt_logprobs.size() == b.size() - 1);
  REQUIRE(rb.logprobs.size() == alone.logprobs.size());
  for (size_t i = 0; i < rb.prompt_logprobs.size(); ++i) {
    CHECK(rb.prompt_logprobs[i].logprob == alone.prompt_logprobs[i].logprob);
    CHECK(rb.prompt_logprobs[i].top.size() == 2);
  }
  for (size_t i = 0; i < rb.logprobs.size(); ++i) CHECK(rb.logprobs[i].logprob == alone.logprobs[i].logprob);
  CHECK(rbusy.tokens == lm.generate(lm.encode("xyz"), g).tokens);
  CHECK(first.logprobs.size() == first.tokens.size());
  // Without prompt log-probabilities the prefix cache serves again.
  auto again = scheduler.submit(b, g);
  wait(*again);
  CHECK(again->cached_prompt_tokens() > 0);

  GenerateOptions too_many = g;
  too_many.top_logprobs = kMaxTopLogprobs + 1;
  CHECK_THROWS_WITH_AS(scheduler.submit(a, too_many), doctest::Contains("at most 20"), Error);
}

TEST_CASE("score: a continuation's log-likelihood and whether it is the greedy one") {
  const LanguageModel lm = test_model();
  const std::vector<int32_t> context = lm.encode("Question: what is it? Answer:");
  GenerateOptions greedy;
  greedy.max_new_tokens = 6;
  greedy.sampling.greedy = true;
  greedy.ignore_eos = true;
  const std::vector<int32_t> best = lm.generate(context, greedy).tokens;
  const ScoreResult s = lm.score(context, best, 4);
  CHECK(s.greedy);
  REQUIRE(s.tokens.size() == best.size());
  const std::vector<int32_t> all = joined(context, best);
  const std::vector<float> logits = lm.logits(all);
  const size_t vocab = lm.config().vocab_size;
  double sum = 0;
  for (size_t i = 0; i < best.size(); ++i) {
    const std::span<const float> row(logits.data() + (context.size() - 1 + i) * vocab, vocab);
    CHECK(s.tokens[i].logprob == position_logprobs(row, best[i], 0).logprob);
    check_position(s.tokens[i], row, best[i], 4);
    sum += s.tokens[i].logprob;
  }
  CHECK(s.logprob == sum);

  std::vector<int32_t> other = best;
  other[2] = s.tokens[2].top[1].token;  // the second most likely token at one position
  const ScoreResult o = lm.score(context, other);
  CHECK_FALSE(o.greedy);
  CHECK(o.logprob < s.logprob);
  CHECK(o.tokens[0].logprob == s.tokens[0].logprob);

  // Longer than the context: the context is cut from the left, as the harness cuts it.
  const size_t n_ctx = lm.config().n_ctx;
  std::vector<int32_t> long_context;
  while (long_context.size() < n_ctx + 10) long_context.push_back(context[long_context.size() % context.size()]);
  const ScoreResult cut = lm.score(long_context, best);
  const std::vector<int32_t> whole = joined(long_context, best);
  const std::vector<int32_t> kept(whole.end() - static_cast<std::ptrdiff_t>(n_ctx + 1), whole.end() - 1);
  const std::vector<float> kept_logits = lm.logits(kept);
  for (size_t i = 0; i < best.size(); ++i) {
    const size_t row = kept.size() - best.size() + i;
    CHECK(cut.tokens[i].logprob == position_logprobs({kept_logits.data() + row * vocab, vocab}, best[i], 0).logprob);
  }

  CHECK_THROWS_WITH_AS(lm.score({}, best), doctest::Contains("context"), Error);
  CHECK_THROWS_WITH_AS(lm.score(context, {}), doctest::Contains("empty"), Error);
  CHECK_THROWS_WITH_AS(lm.score(context, std::vector<int32_t>(n_ctx + 1, 1)), doctest::Contains("exceed"), Error);
  CHECK_THROWS_WITH_AS(lm.score(context, std::vector<int32_t>{1 << 20}), doctest::Contains("outside"), Error);
  CHECK_THROWS_WITH_AS(lm.score(context, best, 21), doctest::Contains("at most 20"), Error);
}
