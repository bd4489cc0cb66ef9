// Constrained decoding in the engine (GenerateOptions::grammar): whatever the
// weights, the output is a sentence of the grammar (or a prefix of one when
// max_new_tokens ran out), alone, in a batch and through the scheduler, with
// the same tokens each way; the sequence ends where the grammar does.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "engine/mmgpt.hpp"
#include "engine/scheduler.hpp"
#include "engine_test_model.hpp"
#include "text/grammar.hpp"
#include "text/json_schema.hpp"

using namespace mmgpt;
using namespace std::chrono_literals;

namespace {

// Characters enough for JSON; the last one is the end-of-text token.
const std::string kAlphabet = "abcdefghijklmnopqrstuvwxyzABC0123456789 {}[]\":,.-\\\n$";

LanguageModel test_model(int64_t eos) {
  const std::string path = test::temp_path("constrained-" + std::to_string(eos) + ".mmgpt");
  ModelConfig cfg = test::small_config(/*n_layer=*/2, /*n_head=*/4, /*n_embd=*/64, /*n_ctx=*/256,
                                       static_cast<uint32_t>(kAlphabet.size()));
  test::write_random_model(path, cfg, 31, kAlphabet, 0.5f, eos, Layout::Panel16);
  return LanguageModel::load(path);
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8},
    "n": {"type": "integer", "minimum": -50, "maximum": 50},
    "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 3},
    "ok": {"type": "boolean"}},
  "required": ["name", "n", "ok"], "additionalProperties": false})";

}  // namespace

TEST_CASE("constrained generation: every output is the grammar's, alone, batched and scheduled alike") {
  for (int64_t eos : {int64_t{-1}, static_cast<int64_t>(kAlphabet.size() - 1)}) {
    CAPTURE(eos);
    const LanguageModel lm = test_model(eos);
    const auto grammar = Grammar::parse(json_schema_grammar(kSchema));
    GenerateOptions o;
    o.max_new_tokens = 200;
    o.grammar = grammar;
    std::vector<GenerationResult> alone;
    std::vector<std::vector<int32_t>> prompts;
    for (uint64_t seed = 0; seed < 12; ++seed) {
      CAPTURE(seed);
      o.sampling.seed = seed;
      o.sampling.greedy = seed == 0;
      o.sampling.temperature = 1.5f;  // far from the grammar's wishes: the mask does the work
      o.sampling.top_k = 0;
      const std::vector<int32_t> prompt = lm.encode(seed % 2 ? "x" : "abc");
      const GenerationResult r = lm.generate(prompt, o);
      const bool whole = GrammarMatcher::matches(*grammar, r.text, true);
      if (r.reason == StopReason::Length) {
        CHECK(GrammarMatcher::matches(*grammar, r.text, false));
      } else {
        CHECK(r.reason == StopReason::EndOfText);
        CHECK(whole);
      }
      CHECK(r.text.back() == '}');
      if (seed > 0) {
        alone.push_back(r);
        prompts.push_back(prompt);
      }
    }
    // A batch of the sampled ones with one seed each is not the API; the same seed for all:
    o.sampling.greedy = false;
    o.sampling.seed = 77;
    const std::vector<GenerationResult> batch = lm.generate_batch(prompts, o);
    SchedulerOptions so;
    so.max_running = 4;
    so.prefill_chunk = 3;
    Scheduler scheduler(lm, so);
    std::vector<std::shared_ptr<Job>> jobs;
    for (const auto& p : prompts) jobs.push_back(scheduler.submit(p, o));
    for (size_t i = 0; i < prompts.size(); ++i) {
      const GenerationResult one = lm.generate(prompts[i], o);
      CHECK(batch[i].tokens == one.tokens);
      GenerationResult scheduled;
      for (;;) {
        JobUpdate u = jobs[i]->wait(1000ms);
        if (u.finished) {
          REQUIRE(u.error.empty());
          scheduled = u.result;
          break;
        }
      }
      CHECK(scheduled.tokens == one.tokens);
      CHECK(scheduled.reason == one.reason);
    }
  }
}

TEST_CASE("constrained generation: the end, an impossible grammar, and logprobs of the unmasked logits") {
  const LanguageModel lm = test_model(static_cast<int64_t>(kAlphabet.size() - 1));
  GenerateOptions o;
  o.max_new_tokens = 50;
  o.sampling.greedy = true;
  o.grammar = Grammar::parse(R"(root ::= "yes" | "no")");
  GenerationResult r = lm.generate(lm.encode("a"), o);
  CHECK((r.text == "yes" || r.text == "no"));
  CHECK(r.reason == StopReason::EndOfText);  // nothing may follow: ended without an end token
  // ignore_eos: the end token is never sampled; the grammar's end still ends it.
  o.ignore_eos = true;
  o.grammar = Grammar::parse(R"(root ::= [a-c]{1,5})");
  r = lm.generate(lm.encode("a"), o);
  CHECK(GrammarMatcher::matches(*o.grammar, r.text, true));
  // Bytes no token spells: a clear error.
  o.grammar = Grammar::parse(R"(root ::= "~")");
  CHECK_THROWS_WITH_AS(lm.generate(lm.encode("a"), o), doctest::Contains("allows no token"), Error);
  // Through the scheduler: that request fails with the error, the one beside it runs on.
  {
    Scheduler scheduler(lm, SchedulerOptions{});
    GenerateOptions plain;
    plain.max_new_tokens = 30;
    plain.ignore_eos = true;
    auto good = scheduler.submit(lm.encode("abc"), plain);
    auto bad = scheduler.submit(lm.encode("abc"), o);
    auto wait = [](Job& job) {
      for (;;)
        if (JobUpdate u = job.wait(1000ms); u.finished) return u;
    };
    const JobUpdate b = wait(*bad);
    CHECK(b.request_error);
    CHECK(b.error.find("allows no token") != std::string::npos);
    const JobUpdate g = wait(*good);
    CHECK(g.error.empty());
    CHECK(g.result.tokens == lm.generate(lm.encode("abc"), plain).tokens);
  }
  // Log-probabilities are the model's, not the masked distribution's.
  o.ignore_eos = false;
  o.grammar = Grammar::parse(R"(root ::= "z"+)");
  o.logprobs = true;
  o.max_new_tokens = 4;
  r = lm.generate(lm.encode("a"), o);
  REQUIRE(r.logprobs.size() == r.tokens.size());
  const std::vector<float> logits = lm.logits(lm.encode("a"));
  CHECK(r.logprobs[0].logprob == position_logprobs(logits, r.tokens[0], 0).logprob);
  CHECK(r.logprobs[0].logprob < 0.0f);
}
