// The decode prefetch tuner (engine/decode_prefetch_tuner.hpp): which hint it
// gives each step, when it compares, what it switches on, and that a decode
// under it gives the bits of a fixed hint.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "decode_prefetch_guard.hpp"
#include "engine/decode_prefetch_tuner.hpp"
#include "engine/executor.hpp"
#include "engine_test_model.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"

using namespace mmgpt;
using kernels::DecodePrefetch;

namespace {

constexpr DecodePrefetch kStart = DecodePrefetch::Nta, kOther = DecodePrefetch::None;
constexpr DecodePrefetch S = kStart, O = kOther;

// Steps of one second: a block is one untimed step and one timed one.
// Waits in seconds are then waits in steps.
DecodePrefetchTuner::Params params(size_t first, double min_period, double max_period) {
  DecodePrefetchTuner::Params p;
  p.first = first, p.pairs = 4, p.settle = 1, p.block_seconds = 0.5;
  p.min_period = min_period, p.max_period = max_period, p.margin = 0.02;
  return p;
}

// Runs `steps` steps of `owner` on `t`, each taking cost(hint) seconds;
// returns the hints given, in order.
template <class Cost>
std::vector<DecodePrefetch> run_steps(DecodePrefetchTuner& t, const void* owner, size_t steps, Cost cost) {
  std::vector<DecodePrefetch> given;
  for (size_t i = 0; i < steps; ++i) {
    const DecodePrefetch h = t.next(owner);
    given.push_back(h);
    t.record(owner, h, cost(h));
  }
  return given;
}

size_t count_of(const std::vector<DecodePrefetch>& v, DecodePrefetch h) {
  size_t n = 0;
  for (DecodePrefetch x : v) n += x == h;
  return n;
}

}  // namespace

TEST_CASE("tuner: the first comparison after `first` steps, in blocks, the pairs in alternating order") {
  DecodePrefetchTuner t(kStart, kOther, params(3, 8, 64));
  int owner = 0;
  const auto given = run_steps(t, &owner, 3 + 16, [](DecodePrefetch) { return 1.0; });
  const std::vector<DecodePrefetch> expected = {S, S, S,                  // the first 3 steps
                                                O, O, S, S, S, S, O, O,   // pairs 0 and 1: blocks of 2
                                                O, O, S, S, S, S, O, O};  // pairs 2 and 3
  CHECK(given == expected);
  CHECK(t.counts().comparisons == 1);
  CHECK(t.counts().switches == 0);  // equal times: no switch
  CHECK(t.choice() == kStart);
}

TEST_CASE("tuner: a block of short steps lasts until its timed steps add up to block_seconds") {
  DecodePrefetchTuner::Params p = params(0, 8, 64);
  p.block_seconds = 1e-3;
  DecodePrefetchTuner t(kStart, kOther, p);
  int owner = 0;
  // Steps of 9-10 us: a block is 1 untimed step and 100-112 timed ones.
  size_t steps = 0;
  while (t.counts().comparisons == 0 && steps < 10000) {
    const DecodePrefetch h = t.next(&owner);
    t.record(&owner, h, h == kOther ? 9e-6 : 1e-5);
    ++steps;
  }
  CHECK(steps >= 8 * 101);
  CHECK(steps <= 8 * 114);
  CHECK(t.choice() == kOther);  // 10% faster
}

TEST_CASE("tuner: switches to the faster hint, and back when the host changes") {
  DecodePrefetchTuner t(kStart, kOther, params(2, 16, 256));
  int owner = 0;
  auto none_faster = [](DecodePrefetch h) { return h == kOther ? 0.9 : 1.0; };
  // None 10% faster: taken at the first comparison.
  run_steps(t, &owner, 2 + 16, none_faster);
  CHECK(t.choice() == kOther);
  CHECK(t.counts().switches == 1);
  // Then runs with it for min_period seconds (18 steps of 0.9 s: the wait
  // ends when the seconds run out), then compares again and keeps it.
  auto given = run_steps(t, &owner, 18, none_faster);
  CHECK(count_of(given, kOther) == 18);
  run_steps(t, &owner, 16, none_faster);
  CHECK(t.counts().comparisons == 2);
  CHECK(t.choice() == kOther);
  // The host changes: the vendor's hint is now 15% faster. Within the wait
  // (doubled to 32 seconds: 32 steps of 1 s) and one comparison, it is back.
  given = run_steps(t, &owner, 32 + 16, [](DecodePrefetch h) { return h == kStart ? 0.85 : 1.0; });
  CHECK(t.choice() == kStart);
  CHECK(t.counts().switches == 2);
  CHECK(count_of(given, kStart) == 8);  // the comparison's blocks with it; the rest ran the old choice
}

TEST_CASE("tuner: with noisy steps a slower hint is not taken, and the waits double up to the longest") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> jitter(0.97, 1.03);  // +-3% per step
  {
    // None 5% slower: never taken; its steps are only the comparisons' blocks.
    DecodePrefetchTuner t(kStart, kOther, params(0, 8, 64));
    int owner = 0;
    const auto given =
        run_steps(t, &owner, 4000, [&](DecodePrefetch h) { return (h == kOther ? 1.05 : 1.0) * jitter(rng); });
    const auto c = t.counts();
    CHECK(c.switches == 0);
    // Comparisons of 16 steps, then waits of 16, 32, 64, 64, ... seconds (a
    // step takes 0.97-1.03 s): about one every 80 steps after the third, 51.
    CHECK(c.comparisons >= 50);
    CHECK(c.comparisons <= 52);
    CHECK(count_of(given, kOther) == 8 * c.comparisons);
  }
  {
    // The two equal: switching costs nothing then, and happens now and then.
    DecodePrefetchTuner t(kStart, kOther, params(0, 8, 64));
    int owner = 0;
    run_steps(t, &owner, 4000, [&](DecodePrefetch) { return jitter(rng); });
    const auto c = t.counts();
    MESSAGE(c.switches << " switches in " << c.comparisons << " comparisons between equal hints");
    CHECK(c.switches < c.comparisons / 2);
  }
}

TEST_CASE("tuner: another owner's steps run the choice and are not timed; a stalled comparison is dropped") {
  DecodePrefetchTuner::Params p = params(0, 8, 64);
  p.pairs = 2, p.settle = 0;  // blocks of one timed step
  DecodePrefetchTuner t(kStart, kOther, p);
  int a = 0, b = 0;
  CHECK(t.next(&a) == kOther);  // a's comparison begins: pair 0, the other hint first
  t.record(&a, kOther, 0.5);
  for (int i = 0; i < 5; ++i) {  // b meanwhile: the choice, not part of a's comparison
    CHECK(t.next(&b) == kStart);
    t.record(&b, kStart, 10.0);
  }
  CHECK(t.next(&a) == kStart);  // a's pair 0 goes on where it was
  t.record(&a, kStart, 1.0);
  // A record with a hint next() did not give (the setting moved meanwhile) is ignored.
  CHECK(t.next(&a) == kStart);  // pair 1: the choice first
  t.record(&a, kOther, 0.1);
  t.record(&a, kStart, 1.0);
  CHECK(t.next(&a) == kOther);
  t.record(&a, kOther, 0.5);
  CHECK(t.counts().comparisons == 1);
  CHECK(t.choice() == kOther);  // ratios 0.5 and 0.5: b's slow steps did not count

  // a's next comparison (8 seconds on) stalls after one step: a stops
  // decoding without being forgotten. Once b has run 64 steps meanwhile it
  // is dropped, and b's next step begins a comparison of its own.
  run_steps(t, &a, 8, [](DecodePrefetch) { return 1.0; });
  CHECK(t.next(&a) == kStart);  // a's comparison begins (the old choice first now)
  t.record(&a, kStart, 1.0);
  for (int i = 0; i < 64; ++i) {
    CHECK(t.next(&b) == kOther);
    t.record(&b, kOther, 1.0);
  }
  CHECK(t.next(&b) == kOther);  // not yet: a's comparison still holds
  t.record(&b, kOther, 1.0);    // the 65th: dropped
  const DecodePrefetch for_b = t.next(&b);
  const DecodePrefetch for_a = t.next(&a);
  CHECK(for_b == kStart);  // b's comparison, pair 0: the hint not chosen (nta now) first
  CHECK(for_a == kOther);  // a runs the choice meanwhile
  // forget(): b goes away; the next caller begins a comparison at once.
  t.forget(&b);
  CHECK(t.next(&a) == kStart);
}

TEST_CASE("decode under the process's tuner gives the bits of a fixed hint, and counts its steps") {
  ModelConfig cfg = test::small_config(2, 4, 64, 600, 97);
  const std::string path = test::temp_path("engine_prefetch_tuner.mmgpt");
  test::write_random_model(path, cfg, 3, "", 0.2f, -1, Layout::Panel16, WeightType::Q4_0);
  auto model = Model::load(path);
  const auto ids = test::random_ids(cfg.n_ctx, cfg.vocab_size, 9);
  kt::DecodePrefetchGuard guard;
  auto decode_all = [&] {
    Executor ex(model);
    KVCache cache(cfg);
    std::vector<float> all;
    for (size_t t = 0; t < ids.size(); ++t) {
      const auto l = ex.run(std::span(ids).subspan(t, 1), cache, 1);
      all.insert(all.end(), l.begin(), l.end());
    }
    return all;
  };
  REQUIRE(kernels::force_decode_prefetch("nta"));
  const auto fixed = decode_all();
  REQUIRE(kernels::force_decode_prefetch("auto"));
  const auto before = decode_prefetch_steps();
  const auto tuned = decode_all();  // 600 steps: a comparison from step 4 on
  const auto after = decode_prefetch_steps();
  CHECK(std::memcmp(tuned.data(), fixed.data(), fixed.size() * sizeof(float)) == 0);
  size_t steps = 0;
  for (size_t h = 0; h < after.size(); ++h) steps += after[h] - before[h];
  const size_t none = after[size_t(DecodePrefetch::None)] - before[size_t(DecodePrefetch::None)];
  CHECK(steps == ids.size());
  CHECK(none > 0);  // the comparison ran some steps with none, whichever won
  MESSAGE(none << " of " << steps << " steps with none");
}

TEST_CASE("batched decode steps are tuned apart from one sequence's, with the bits of a fixed hint") {
  // A decode step of a batch (one new token for each of its sequences) runs
  // other rows through the kernels than one sequence's, and its hint can be
  // the other one (decode_prefetch_tuner.hpp): it has a tuner of its own,
  // keyed by the batch size, and its steps are counted as decode steps.
  ModelConfig cfg = test::small_config(2, 4, 64, 600, 97);
  const std::string path = test::temp_path("engine_prefetch_tuner_batch.mmgpt");
  test::write_random_model(path, cfg, 5, "", 0.2f, -1, Layout::Panel16, WeightType::Q8_0);
  auto model = Model::load(path);
  const auto a = test::random_ids(cfg.n_ctx, cfg.vocab_size, 11), b = test::random_ids(cfg.n_ctx, cfg.vocab_size, 12);
  kt::DecodePrefetchGuard guard;
  auto decode_pair = [&] {
    Executor ex(model);
    KVCache ca(cfg), cb(cfg);
    std::vector<float> all;
    for (size_t t = 0; t < a.size(); ++t) {
      const SequenceStep steps[2] = {{std::span(a).subspan(t, 1), &ca, 1}, {std::span(b).subspan(t, 1), &cb, 1}};
      const auto l = ex.run(steps);
      all.insert(all.end(), l.begin(), l.end());
    }
    return all;
  };
  REQUIRE(kernels::force_decode_prefetch("nta"));
  const auto fixed = decode_pair();
  REQUIRE(kernels::force_decode_prefetch("auto"));
  DecodePrefetchTuner& pairs = decode_prefetch_tuner(mmgpt::thread_budget(), 2);
  DecodePrefetchTuner& singles = decode_prefetch_tuner(mmgpt::thread_budget(), 1);
  CHECK(&pairs != &singles);
  CHECK(&pairs == &decode_prefetch_tuner(mmgpt::thread_budget(), 2));
  const size_t pair_comparisons = pairs.counts().comparisons, single_comparisons = singles.counts().comparisons;
  const auto before = decode_prefetch_steps();
  const auto tuned = decode_pair();  // 600 steps of two sequences
  const auto after = decode_prefetch_steps();
  CHECK(std::memcmp(tuned.data(), fixed.data(), fixed.size() * sizeof(float)) == 0);
  size_t steps = 0;
  for (size_t h = 0; h < after.size(); ++h) steps += after[h] - before[h];
  CHECK(steps == a.size());
  CHECK(after[size_t(DecodePrefetch::None)] > before[size_t(DecodePrefetch::None)]);
  CHECK(pairs.counts().comparisons > pair_comparisons);
  CHECK(singles.counts().comparisons == single_comparisons);
}

TEST_CASE("describe_decode_prefetch_steps: the hints with steps, in order") {
  CHECK(describe_decode_prefetch_steps({3, 0, 5}) == "nta 3, none 5");
  CHECK(describe_decode_prefetch_steps({0, 7, 0}) == "t0 7");
  CHECK(describe_decode_prefetch_steps({0, 0, 0}).empty());
}
