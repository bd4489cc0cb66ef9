// Continuous batching (engine/scheduler.hpp): whatever joins, leaves, shares
// a prefix or is prefilled in chunks beside it, each request's tokens, text
// and stop reason are those of LanguageModel::generate for it alone.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/mmgpt.hpp"
#include "engine/scheduler.hpp"
#include "engine_test_model.hpp"

using namespace mmgpt;
using namespace std::chrono_literals;

namespace {

const std::string kAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?'\n-()0123";

struct Request {
  std::string prompt;
  GenerateOptions options;
};

// Waits for the job's end; returns its result with the streamed text in `streamed`.
GenerationResult collect(Job& job, std::string& streamed, std::string* error = nullptr) {
  for (;;) {
    JobUpdate u = job.wait(1000ms);
    streamed += u.text;
    if (u.finished) {
      if (error) *error = u.error;
      REQUIRE((error || u.error.empty()));
      return u.result;
    }
  }
}

LanguageModel test_model(uint32_t n_ctx = 64, uint32_t n_embd = 64) {
  const std::string path = test::temp_path("scheduler-" + std::to_string(n_ctx) + ".mmgpt");
  ModelConfig cfg = test::small_config(/*n_layer=*/2, /*n_head=*/4, n_embd, n_ctx,
                                       static_cast<uint32_t>(kAlphabet.size()));
  test::write_random_model(path, cfg, 11, kAlphabet, 0.2f, /*eos_id=*/-1, Layout::Panel16);
  return LanguageModel::load(path);
}

std::vector<Request> requests() {
  std::vector<Request> r;
  const std::string preamble = "You are a helpful assistant. ";
  const char* prompts[] = {"ROMEO: ", "a", "the quick brown fox jumps", "Hello", "stop here please", "x"};
  for (size_t i = 0; i < 12; ++i) {
    Request q;
    q.prompt = (i % 3 == 0 ? preamble : std::string()) + prompts[i % 6] + (i >= 6 ? "!" : "");
    q.options.max_new_tokens = 5 + (i * 7) % 20;
    q.options.ignore_eos = true;
    q.options.sampling.seed = 100 + i;
    if (i % 4 == 0) q.options.sampling.greedy = true;
    if (i % 4 == 1) q.options.sampling.top_k = 5;
    if (i % 4 == 2) q.options.sampling.top_p = 0.8f, q.options.sampling.repetition_penalty = 1.2f;
    if (i % 3 == 1) q.options.stop = {"e", "a", "o", "t", " ", "s"};
    r.push_back(q);
  }
  return r;
}

}  // namespace

TEST_CASE("continuous batching: each request's result equals generating it alone") {
  const LanguageModel lm = test_model();
  const std::vector<Request> all = requests();
  std::vector<GenerationResult> alone;
  for (const Request& q : all) alone.push_back(lm.generate(lm.encode(q.prompt), q.options));
  bool some_stopped = false;
  for (const auto& a : alone) some_stopped = some_stopped || a.reason == StopReason::StopString;
  CHECK(some_stopped);

  // Small chunks and few slots: prompts are split over steps, requests wait, join mid-run and share prefixes.
  for (size_t chunk : {size_t{3}, size_t{256}}) {
    CAPTURE(chunk);
    SchedulerOptions o;
    o.max_running = 4;
    o.prefill_chunk = chunk;
    o.prefix_cache = 2;
    Scheduler scheduler(lm, o);
    std::vector<std::shared_ptr<Job>> jobs;
    for (size_t i = 0; i < all.size(); ++i) {
      jobs.push_back(scheduler.submit(lm.encode(all[i].prompt), all[i].options));
      if (i % 3 == 2) std::this_thread::sleep_for(2ms);  // later ones arrive while earlier ones run
    }
    size_t reused = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      CAPTURE(i);
      std::string streamed;
      const GenerationResult r = collect(*jobs[i], streamed);
      CHECK(r.tokens == alone[i].tokens);
      CHECK(r.text == alone[i].text);
      CHECK(streamed == alone[i].text);
      CHECK(r.reason == alone[i].reason);
      reused += jobs[i]->cached_prompt_tokens();
    }
    const SchedulerStats s = scheduler.stats();
    CHECK(s.running == 0);
    CHECK(s.queued == 0);
    CHECK(s.prompt_tokens_run + s.prompt_tokens_reused == [&] {
      size_t n = 0;
      for (const Request& q : all) n += lm.encode(q.prompt).size();
      return n;
    }());
    CHECK(s.prompt_tokens_reused == reused);
    CHECK(s.step_sequences > s.steps);  // steps did batch several sequences
  }
}

TEST_CASE("prefix cache: a prompt extending a finished one starts from its keys and values") {
  const LanguageModel lm = test_model();
  SchedulerOptions o;
  o.prefix_cache = 1;
  Scheduler scheduler(lm, o);
  GenerateOptions g;
  g.max_new_tokens = 6;
  g.sampling.seed = 9;
  const std::vector<int32_t> first = lm.encode("You are a helpful assistant. Say hi");
  std::string streamed;
  auto j1 = scheduler.submit(first, g);
  const GenerationResult r1 = collect(*j1, streamed);
  CHECK(j1->cached_prompt_tokens() == 0);

  // The same prompt again (a retry): all but its last token come from the cache.
  auto j2 = scheduler.submit(first, g);
  streamed.clear();
  const GenerationResult r2 = collect(*j2, streamed);
  CHECK(j2->cached_prompt_tokens() == first.size() - 1);
  CHECK(r2.tokens == r1.tokens);

  // A longer prompt sharing the preamble.
  const std::vector<int32_t> other = lm.encode("You are a helpful assistant. Tell me more about it");
  auto j3 = scheduler.submit(other, g);
  streamed.clear();
  const GenerationResult r3 = collect(*j3, streamed);
  CHECK(j3->cached_prompt_tokens() == lm.encode("You are a helpful assistant. ").size());
  CHECK(r3.tokens == lm.generate(other, g).tokens);

  // prefix_cache = 0: no reuse, the same result.
  o.prefix_cache = 0;
  Scheduler plain(lm, o);
  for (int round = 0; round < 2; ++round) {
    auto j = plain.submit(first, g);
    streamed.clear();
    CHECK(collect(*j, streamed).tokens == r1.tokens);
    CHECK(j->cached_prompt_tokens() == 0);
  }
}

TEST_CASE("scheduler: cancelling, a full queue, bad requests and draining") {
  const LanguageModel lm = test_model(2048, 256);  // slow enough that jobs are still running when stopped
  SchedulerOptions o;
  o.max_running = 1;
  o.max_queued = 2;
  auto scheduler = std::make_unique<Scheduler>(lm, o);
  GenerateOptions g;
  g.max_new_tokens = 2000;
  g.ignore_eos = true;
  g.sampling.greedy = true;
  const std::vector<int32_t> p = lm.encode("abc");

  SUBCASE("a cancelled job stops, and those behind it run") {
    auto a = scheduler->submit(p, g);
    auto b = scheduler->submit(p, g);
    while (a->wait(10ms).new_tokens == 0) {
    }
    a->cancel();
    std::string s;
    const GenerationResult ra = collect(*a, s);
    CHECK(ra.reason == StopReason::Callback);
    CHECK(ra.tokens.size() < 2000);
    b->cancel();
    CHECK(collect(*b, s).reason == StopReason::Callback);
  }
  SUBCASE("a job cancelled while queued never runs, and leaves the prefix cache alone") {
    auto a = scheduler->submit(p, g);
    const std::vector<int32_t> other = lm.encode("xyz");
    auto b = scheduler->submit(other, g);  // queued behind a
    while (a->wait(10ms).new_tokens == 0) {
    }
    b->cancel();
    a->cancel();
    std::string s;
    CHECK(collect(*a, s).reason == StopReason::Callback);
    const GenerationResult rb = collect(*b, s);
    CHECK(rb.reason == StopReason::Callback);
    CHECK(rb.tokens.empty());
    // a's cache, kept with its prompt, serves the same prompt again.
    GenerateOptions shorter = g;
    shorter.max_new_tokens = 2;
    auto c = scheduler->submit(p, shorter);
    CHECK(collect(*c, s).tokens.size() == 2);
    CHECK(c->cached_prompt_tokens() == p.size() - 1);
  }
  SUBCASE("the queue holds max_queued jobs; more are refused") {
    std::vector<std::shared_ptr<Job>> jobs;
    jobs.push_back(scheduler->submit(p, g));
    while (scheduler->stats().running == 0) std::this_thread::sleep_for(1ms);
    jobs.push_back(scheduler->submit(p, g));
    jobs.push_back(scheduler->submit(p, g));
    CHECK_THROWS_AS(scheduler->submit(p, g), SchedulerFull);
    for (auto& j : jobs) j->cancel();
  }
  SUBCASE("requests that cannot run are refused at once") {
    CHECK_THROWS_AS(scheduler->submit({}, g), Error);
    CHECK_THROWS_AS(scheduler->submit({0, 100000}, g), Error);
    GenerateOptions longer = g;
    longer.max_new_tokens = 2046;
    CHECK_THROWS_WITH_AS(scheduler->submit(p, longer), doctest::Contains("exceed the context length"), Error);
    longer.max_new_tokens = 2045;
    scheduler->submit(p, longer)->cancel();
    GenerateOptions bad = g;
    bad.sampling.greedy = false;
    bad.sampling.temperature = -1;
    CHECK_THROWS_AS(scheduler->submit(p, bad), Error);
  }
  SUBCASE("draining refuses new jobs, and cancels running ones at the deadline") {
    auto a = scheduler->submit(p, g);
    auto b = scheduler->submit(p, g);  // queued behind a
    while (a->wait(10ms).new_tokens == 0) {
    }
    std::thread t([&] { scheduler->drain(SteadyClock::now() + 50ms); });
    while (true) {
      try {
        scheduler->submit(p, g)->cancel();
      } catch (const SchedulerFull& e) {  // "the queue is full" until the drain begins
        if (std::string(e.what()).find("shutting down") != std::string::npos) break;
      }
      std::this_thread::sleep_for(1ms);
    }
    t.join();
    std::string s, error;
    CHECK(collect(*a, s).reason == StopReason::Callback);
    collect(*b, s, &error);
    CHECK(scheduler->stats().running == 0);
  }
  SUBCASE("a scheduler destroyed mid-run finishes its jobs") {
    auto a = scheduler->submit(p, g);
    auto b = scheduler->submit(p, g);
    scheduler.reset();
    std::string s, error;
    CHECK(collect(*a, s, &error).reason == StopReason::Callback);
    collect(*b, s, &error);
  }
}
