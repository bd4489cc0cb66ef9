// One mapped model serving many sessions at once: eight threads run different
// generations (prompts, seeds, sampling settings, stop strings, batches,
// logits) against one LanguageModel, each inside a TBB arena of a different
// thread count, and every result must be identical, bit for bit, to running
// that session alone.
#include <doctest/doctest.h>
#include <tbb/task_arena.h>

#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "engine/mmgpt.hpp"
#include "engine_test_model.hpp"

using namespace mmgpt;

namespace {

const std::string kAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?'\n-()0123";

// A session and everything it produced, rendered comparable.
struct Session {
  std::vector<std::string> prompts;  // more than one: generate_batch
  GenerateOptions options;
  bool logits_only = false;
  int arena_threads = 1;  // the TBB concurrency it runs under when run alongside the others
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::string> texts;
  std::vector<int> reasons;
  std::string streamed;       // the callback's text, in order, tagged by sequence
  std::vector<float> logits;  // logits_only sessions

  bool operator==(const Outcome&) const = default;
};

Outcome run(const LanguageModel& lm, const Session& s) {
  Outcome out;
  if (s.logits_only) {
    out.logits = lm.logits(lm.encode(s.prompts[0]));
    return out;
  }
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : s.prompts) prompts.push_back(lm.encode(p));
  const auto results = lm.generate_batch(prompts, s.options, [&](const TokenEvent& e) {
    out.streamed += std::to_string(e.sequence) + ":" + std::string(e.text) + "|";
    return true;
  });
  for (const auto& r : results) {
    out.tokens.push_back(r.tokens);
    out.texts.push_back(r.text);
    out.reasons.push_back(static_cast<int>(r.reason));
  }
  return out;
}

std::vector<Session> sessions() {
  std::vector<Session> s(8);
  s[0].prompts = {"ROMEO: "};
  s[0].options.sampling.greedy = true;
  s[1].prompts = {"the quick brown fox"};
  s[1].options.sampling.seed = 1;
  s[1].options.sampling.top_k = 10;
  s[2].prompts = {"a"};
  s[2].options.sampling.seed = 2;
  s[2].options.sampling.temperature = 1.3f;
  s[2].options.sampling.top_p = 0.9f;
  s[3].prompts = {"Hello, world!"};
  s[3].options.sampling.seed = 3;
  s[3].options.sampling.min_p = 0.05f;
  s[3].options.sampling.repetition_penalty = 1.3f;
  s[4].prompts = {"stop here"};
  s[4].options.sampling.seed = 4;
  s[4].options.stop = {"e", "a", "o", "t", " ", "s"};
  s[5].prompts = {"one", "two prompts of different lengths", "3"};  // a batch
  s[5].options.sampling.seed = 5;
  s[5].options.sampling.temperature = 0.7f;
  s[6].prompts = {"logits of a prompt"};
  s[6].logits_only = true;
  s[7].prompts = {std::string(40, 'x')};  // longer than the context: cropped, then the window slides
  s[7].options.sampling.greedy = true;
  s[7].options.sampling.repetition_penalty = 1.1f;
  for (size_t i = 0; i < s.size(); ++i) {
    s[i].options.max_new_tokens = 40;  // past n_ctx = 32 for the short prompts too
    s[i].options.ignore_eos = true;
    s[i].arena_threads = 1 + static_cast<int>(i % 4);
  }
  return s;
}

}  // namespace

TEST_CASE("one model, eight concurrent sessions: each result equals the session run alone") {
  const std::string path = test::temp_path("concurrency.mmgpt");
  ModelConfig cfg = test::small_config(/*n_layer=*/2, /*n_head=*/4, /*n_embd=*/128, /*n_ctx=*/32,
                                       static_cast<uint32_t>(kAlphabet.size()));
  test::write_random_model(path, cfg, 7, kAlphabet, 0.2f, -1, Layout::Panel16);
  const LanguageModel lm = LanguageModel::load(path);
  const std::vector<Session> all = sessions();

  std::vector<Outcome> alone;
  for (const Session& s : all) alone.push_back(run(lm, s));
  // The sessions are different enough that a mix-up would show.
  for (size_t i = 0; i + 1 < alone.size(); ++i) CHECK_FALSE(alone[i] == alone[i + 1]);
  CHECK(alone[4].reasons[0] == static_cast<int>(StopReason::StopString));
  CHECK(alone[5].tokens.size() == 3);

  constexpr int kRounds = 3;
  for (int round = 0; round < kRounds; ++round) {
    CAPTURE(round);
    std::vector<Outcome> together(all.size());
    std::latch start(static_cast<std::ptrdiff_t>(all.size()));
    std::vector<std::thread> threads;
    // Each round rotates the arena sizes, so every session also runs under other thread counts.
    for (size_t i = 0; i < all.size(); ++i)
      threads.emplace_back([&, i] {
        tbb::task_arena arena(1 + static_cast<int>((i + round) % 4));
        start.arrive_and_wait();
        arena.execute([&] { together[i] = run(lm, all[i]); });
      });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < all.size(); ++i) {
      CAPTURE(i);
      CHECK(together[i] == alone[i]);
    }
  }
}

TEST_CASE("copies of a LanguageModel share the mapping and run concurrently") {
  const std::string path = test::temp_path("concurrency_copies.mmgpt");
  test::write_random_model(path, test::small_config(2, 2, 32, 16, static_cast<uint32_t>(kAlphabet.size())), 9,
                           kAlphabet);
  const LanguageModel lm = LanguageModel::load(path);
  GenerateOptions opt;
  opt.max_new_tokens = 24;
  opt.ignore_eos = true;
  std::vector<GenerationResult> alone;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    opt.sampling.seed = seed;
    alone.push_back(lm.generate(lm.encode("abc"), opt));
  }
  std::vector<GenerationResult> together(alone.size());
  std::vector<std::thread> threads;
  for (uint64_t seed = 0; seed < alone.size(); ++seed)
    threads.emplace_back([&, seed, copy = lm] {  // each thread its own copy
      GenerateOptions o = opt;
      o.sampling.seed = seed;
      together[seed] = copy.generate(copy.encode("abc"), o);
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < alone.size(); ++i) {
    CAPTURE(i);
    CHECK(together[i].tokens == alone[i].tokens);
    CHECK(together[i].text == alone[i].text);
  }
  CHECK(lm.shared_model().use_count() >= 1);
}
