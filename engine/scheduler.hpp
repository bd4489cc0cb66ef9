#pragma once
// Continuous batching: one thread steps every running sequence together
// through one executor, so a decode step reads the weights once for all of
// them. Requests join between steps; a prompt is prefilled in chunks that
// share a per-step token budget, so running sequences keep their pace; a
// finished or cancelled sequence leaves at once.
//
// Finished sequences' KV caches are kept with the tokens they hold, up to
// max_running + prefix_cache caches in all: a request whose prompt begins
// with a kept cache's tokens starts from that cache (a shared system
// preamble, a retried request); any other takes the oldest kept cache's
// memory, already faulted in, rather than a fresh one. Every sequence is a
// GenerationSequence, so its tokens are exactly those of run_generation for
// the same prompt and options, whatever else runs beside it.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/executor.hpp"
#include "engine/generation.hpp"
#include "engine/kv_cache.hpp"
#include "engine/mmgpt.hpp"

namespace mmgpt {

struct SchedulerOptions {
  size_t max_running = 16;     // sequences in a step
  size_t max_queued = 64;      // requests waiting to run; more are refused (SchedulerFull)
  size_t prefill_chunk = 256;  // prompt tokens per step, over all the prompts being prefilled
  size_t prefix_cache = 4;     // KV caches kept beyond the running ones (below); 0: no prefix reuse
  WeightType kv_dtype = WeightType::F32;
};

// Thrown by submit() when the queue is full or the scheduler is draining.
class SchedulerFull : public Error {
 public:
  using Error::Error;
};

using SteadyClock = std::chrono::steady_clock;

// What a request's submitter sees of it while it runs.
struct JobUpdate {
  std::string text;       // text made since the last update (whole UTF-8 characters, no part of a stop string)
  size_t new_tokens = 0;  // tokens made since the last update
  bool finished = false;  // then `result` is set, and no more updates come
  GenerationResult result;
  std::string error;  // set when the engine failed the request (finished is then true too)
  bool request_error = false;  // ... because of the request itself (its grammar allows no token), not the engine
  // With GenerateOptions::logprobs: those of the tokens made since the last
  // update. With prompt_logprobs: the prompt's, in the update that brings
  // the first token (or, when none is made, in result).
  std::vector<PositionLogprobs> logprobs;
  std::vector<PositionLogprobs> prompt_logprobs;
};

class Job {
 public:
  // Waits up to `timeout` for new text or the end, and takes what is new.
  JobUpdate wait(std::chrono::milliseconds timeout);
  // The sequence leaves before its next step; the job then finishes with StopReason::Callback.
  void cancel();

  size_t prompt_tokens() const { return prompt_.size(); }
  size_t cached_prompt_tokens() const { return cached_tokens_; }  // reused from the prefix cache; set once running
  SteadyClock::time_point submitted() const { return submitted_; }
  // When the first token was sampled; submitted() until then.
  SteadyClock::time_point first_token() const;
  bool cancelled() const;

 private:
  friend class Scheduler;
  Job(std::vector<int32_t> prompt, const GenerateOptions& options)
      : prompt_(std::move(prompt)), options_(options), submitted_(SteadyClock::now()) {}
  void push(std::string_view text, size_t tokens, const PositionLogprobs* logprobs = nullptr,
            const std::vector<PositionLogprobs>* prompt_logprobs = nullptr);
  void finish(GenerationResult result, std::string error, bool request_error = false);

  const std::vector<int32_t> prompt_;
  const GenerateOptions options_;
  const SteadyClock::time_point submitted_;
  size_t cached_tokens_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::string text_;
  size_t tokens_ = 0;
  std::vector<PositionLogprobs> logprobs_, prompt_logprobs_;
  bool finished_ = false, taken_ = false, cancelled_ = false, request_error_ = false;
  SteadyClock::time_point first_token_{};
  GenerationResult result_;
  std::string error_;
};

struct SchedulerStats {
  size_t running = 0, queued = 0;
  uint64_t steps = 0;               // executor steps run
  double step_seconds = 0;          // their time
  uint64_t step_sequences = 0;      // sequences over all steps (step_sequences / steps: the mean batch)
  size_t last_batch = 0;            // sequences in the latest step
  uint64_t prompt_tokens_run = 0;   // prompt tokens prefilled
  uint64_t prompt_tokens_reused = 0;  // prompt tokens taken from the prefix cache instead
};

class Scheduler {
 public:
  // Starts the scheduling thread. Steps run on it with the TBB threads the
  // caller allows (tbb::global_control).
  Scheduler(LanguageModel lm, const SchedulerOptions& options);
  ~Scheduler();  // cancels what is left and joins the thread
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a generation. Throws mmgpt::Error for a request that cannot run
  // (an empty prompt, an id outside the vocabulary, prompt + max_new_tokens
  // past the context length, sampling options out of range), SchedulerFull
  // when max_queued requests are waiting or after drain() began.
  std::shared_ptr<Job> submit(std::vector<int32_t> prompt, const GenerateOptions& options);
  // Queues several generations at once (a request for several completions):
  // all of them, or none. Throws as submit() does.
  std::vector<std::shared_ptr<Job>> submit_all(std::vector<std::vector<int32_t>> prompts,
                                               const std::vector<GenerateOptions>& options);

  // Refuses new requests; lets the running and queued ones go on until
  // `deadline`, then cancels what is left. Returns once nothing is left.
  void drain(SteadyClock::time_point deadline);

  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Running;
  struct Cached {
    std::vector<int32_t> tokens;  // what the cache holds, at positions 0..
    KVCache cache;
  };
  void check(const std::vector<int32_t>& prompt, const GenerateOptions& options) const;
  void loop();
  void admit(std::unique_lock<std::mutex>& lock);
  KVCache take_cache(const std::vector<int32_t>& prompt, bool prompt_logprobs, size_t& cached_tokens);
  void retire(Running& r);
  void drop_queue();  // finishes every queued job unrun
  bool step();

  LanguageModel lm_;
  const SchedulerOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::unique_ptr<Running>> running_;  // only the scheduling thread changes it after admit
  std::vector<Cached> prefix_;                     // most recently finished last
  bool draining_ = false, stop_ = false;
  SteadyClock::time_point deadline_{};
  SchedulerStats stats_;
  std::unique_ptr<Executor> executor_;  // made and used on the scheduling thread
  std::thread thread_;
};

}  // namespace mmgpt
