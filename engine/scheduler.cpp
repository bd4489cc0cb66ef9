#include "engine/scheduler.hpp"

#include <algorithm>
#include <optional>

#include "engine/executor.hpp"
#include "engine/sampler.hpp"
#include "engine/sequence.hpp"

namespace mmgpt {

JobUpdate Job::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !text_.empty() || tokens_ > 0 || (finished_ && !taken_); });
  JobUpdate u;
  u.text = std::move(text_);
  text_.clear();
  u.new_tokens = tokens_;
  tokens_ = 0;
  u.logprobs = std::move(logprobs_);
  logprobs_.clear();
  u.prompt_logprobs = std::move(prompt_logprobs_);
  prompt_logprobs_.clear();
  if (finished_ && !taken_) {
    taken_ = true;
    u.finished = true;
    u.result = std::move(result_);
    u.error = error_;
    u.request_error = request_error_;
  }
  return u;
}

void Job::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
}

SteadyClock::time_point Job::first_token() const {
  std::lock_guard lock(mutex_);
  return first_token_ == SteadyClock::time_point{} ? submitted_ : first_token_;
}

void Job::push(std::string_view text, size_t tokens, const PositionLogprobs* logprobs,
               const std::vector<PositionLogprobs>* prompt_logprobs) {
  {
    std::lock_guard lock(mutex_);
    if (tokens > 0 && first_token_ == SteadyClock::time_point{}) first_token_ = SteadyClock::now();
    text_ += text;
    tokens_ += tokens;
    if (logprobs) logprobs_.push_back(*logprobs);
    if (prompt_logprobs) prompt_logprobs_ = *prompt_logprobs;
  }
  changed_.notify_all();
}

void Job::finish(GenerationResult result, std::string error, bool request_error) {
  {
    std::lock_guard lock(mutex_);
    result_ = std::move(result);
    error_ = std::move(error);
    request_error_ = request_error;
    finished_ = true;
  }
  changed_.notify_all();
}

struct Scheduler::Running {
  std::shared_ptr<Job> job;
  std::optional<GenerationSequence> seq;
  std::string error;  // the request could not go on (its grammar allows no token, say)
};

bool Job::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

Scheduler::Scheduler(LanguageModel lm, const SchedulerOptions& options) : lm_(std::move(lm)), options_(options) {
  if (options_.max_running == 0) throw Error("the scheduler needs room for at least one running sequence");
  if (options_.prefill_chunk == 0) throw Error("the prefill chunk must be at least one token");
  // Every running sequence's cache, allocated and faulted in now: first
  // touches of fresh pages would otherwise stall the steps that admit requests.
  for (size_t i = 0; i < options_.max_running; ++i) {
    prefix_.push_back({{}, KVCache(lm_.config(), options_.kv_dtype)});
    prefix_.back().cache.fault_in();
  }
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Scheduler::check(const std::vector<int32_t>& prompt, const GenerateOptions& options) const {
  const ModelConfig& c = lm_.config();
  if (prompt.empty()) throw Error("the prompt is empty: generation needs a token");
  for (int32_t id : prompt)
    if (id < 0 || static_cast<uint64_t>(id) >= c.vocab_size)
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(c.vocab_size - 1) + ")");
  if (options.max_new_tokens > c.n_ctx || prompt.size() + options.max_new_tokens > c.n_ctx)
    throw Error("the prompt's " + std::to_string(prompt.size()) + " tokens and " +
                std::to_string(options.max_new_tokens) + " new ones exceed the context length " +
                std::to_string(c.n_ctx));
  if (options.kv_dtype != options_.kv_dtype) throw Error("a request's KV dtype must be the scheduler's");
  Sampler sampler(options.sampling);  // throws for options out of range
  (void)sampler;
  check_top_logprobs(options.top_logprobs);
}

std::shared_ptr<Job> Scheduler::submit(std::vector<int32_t> prompt, const GenerateOptions& options) {
  std::vector<std::vector<int32_t>> one;
  one.push_back(std::move(prompt));
  return submit_all(std::move(one), {options})[0];
}

std::vector<std::shared_ptr<Job>> Scheduler::submit_all(std::vector<std::vector<int32_t>> prompts,
                                                        const std::vector<GenerateOptions>& options) {
  if (prompts.size() != options.size()) throw Error("submit_all: a prompt needs its options");
  for (size_t i = 0; i < prompts.size(); ++i) check(prompts[i], options[i]);
  std::vector<std::shared_ptr<Job>> jobs;
  for (size_t i = 0; i < prompts.size(); ++i) jobs.emplace_back(new Job(std::move(prompts[i]), options[i]));
  {
    std::lock_guard lock(mutex_);
    if (draining_ || stop_) throw SchedulerFull("the server is shutting down");
    if (queue_.size() + jobs.size() > options_.max_queued)
      throw SchedulerFull("the queue is full (" + std::to_string(queue_.size()) + " requests waiting)");
    queue_.insert(queue_.end(), jobs.begin(), jobs.end());
  }
  wake_.notify_all();
  return jobs;
}

void Scheduler::drain(SteadyClock::time_point deadline) {
  std::unique_lock lock(mutex_);
  draining_ = true;
  deadline_ = deadline;
  wake_.notify_all();
  idle_.wait(lock, [&] { return queue_.empty() && running_.empty(); });
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  SchedulerStats s = stats_;
  s.running = running_.size();
  s.queued = queue_.size();
  return s;
}

KVCache Scheduler::take_cache(const std::vector<int32_t>& prompt, bool prompt_logprobs, size_t& cached_tokens) {
  // The kept cache sharing the longest prefix with the prompt (at least one token left to run).
  size_t best = prefix_.size(), best_len = 0;
  // A prompt being scored runs whole: it only takes a cache's memory.
  const bool reuse = options_.prefix_cache > 0 && !prompt_logprobs;
  for (size_t i = 0; i < prefix_.size() && reuse; ++i) {
    const std::vector<int32_t>& t = prefix_[i].tokens;
    const size_t n = std::min(t.size(), prompt.size() - 1);
    const size_t len = static_cast<size_t>(std::mismatch(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(n),
                                                         prompt.begin())
                                               .first -
                                           t.begin());
    if (len > best_len) best = i, best_len = len;
  }
  if (best == prefix_.size() && !prefix_.empty()) best = 0;  // nothing shared: reuse the oldest cache's memory
  cached_tokens = best_len;
  if (best == prefix_.size()) return KVCache(lm_.config(), options_.kv_dtype);
  KVCache cache = std::move(prefix_[best].cache);
  prefix_.erase(prefix_.begin() + static_cast<std::ptrdiff_t>(best));
  return cache;
}

void Scheduler::admit(std::unique_lock<std::mutex>&) {
  while (running_.size() < options_.max_running && !queue_.empty()) {
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    if (job->cancelled()) {  // cancelled while it waited: it never takes (or evicts) a cache
      GenerationResult none;
      none.reason = StopReason::Callback;
      job->finish(none, {});
      continue;
    }
    auto r = std::make_unique<Running>();
    r->job = job;
    size_t cached = 0;
    try {
      KVCache cache = take_cache(job->prompt_, job->options_.prompt_logprobs, cached);
      r->seq.emplace(lm_.config(), job->options_, job->prompt_, std::move(cache), cached);
    } catch (const std::exception& e) {  // submit() checked the request; this is memory running out
      GenerationResult none;
      none.reason = StopReason::Callback;
      job->finish(none, e.what());
      continue;
    }
    job->cached_tokens_ = cached;
    stats_.prompt_tokens_reused += cached;
    running_.push_back(std::move(r));
  }
}

void Scheduler::retire(Running& r) {
  GenerationSequence& s = *r.seq;
  const std::string rest = s.flush();
  if (!rest.empty() && s.result().reason != StopReason::Callback && r.error.empty()) r.job->push(rest, 0);
  GenerationResult result = s.result();
  // Keep the cache, with the prefix it holds, while running and kept caches
  // number at most max_running + prefix_cache; the oldest kept one goes first.
  std::vector<int32_t> held(s.tokens().begin(), s.tokens().begin() + static_cast<std::ptrdiff_t>(s.cached_prefix()));
  prefix_.push_back({std::move(held), s.take_cache()});
  const size_t live = static_cast<size_t>(
      std::count_if(running_.begin(), running_.end(), [](const auto& x) { return !x->seq->done(); }));
  const size_t room = options_.max_running + options_.prefix_cache - live;
  while (prefix_.size() > room) prefix_.erase(prefix_.begin());
  r.job->finish(std::move(result), r.error, !r.error.empty());
}

void Scheduler::drop_queue() {
  GenerationResult none;
  none.reason = StopReason::Callback;
  for (auto& job : queue_) job->finish(none, "the server shut down before the request ran");
  queue_.clear();
}

bool Scheduler::step() {
  // Cancelled sequences leave first; then each running sequence's rows: one
  // token for those decoding, prompt chunks for the others within the budget.
  std::vector<Running*> members;
  std::vector<SequenceStep> steps;
  size_t budget = options_.prefill_chunk;
  {
    std::lock_guard lock(mutex_);
    const bool past_deadline = draining_ && SteadyClock::now() >= deadline_;
    for (auto it = running_.begin(); it != running_.end();) {
      Running& r = **it;
      if (past_deadline || r.job->cancelled()) r.seq->finish(StopReason::Callback);
      if (r.seq->done()) {
        retire(r);
        it = running_.erase(it);
        continue;
      }
      ++it;
    }
    if (past_deadline) drop_queue();
    for (auto& r : running_) {
      const size_t pending = r->seq->pending_tokens();
      if (pending > 1 && budget == 0) continue;  // waits for the next step's budget
      const size_t rows = pending == 1 ? 1 : std::min(pending, budget);
      if (pending > 1) budget -= rows;
      steps.push_back(r->seq->next_step(rows));
      members.push_back(r.get());
    }
  }
  if (steps.empty()) return false;

  std::span<const float> logits;
  std::string failure;
  const SteadyClock::time_point t0 = SteadyClock::now();
  try {
    logits = executor_->run(steps);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  const size_t vocab = lm_.config().vocab_size;
  std::lock_guard lock(mutex_);
  ++stats_.steps;
  stats_.step_seconds += std::chrono::duration<double>(SteadyClock::now() - t0).count();
  stats_.step_sequences += members.size();
  stats_.last_batch = members.size();
  size_t row = 0;  // the first logit row of member k
  for (size_t k = 0; k < members.size(); ++k) {
    Running& r = *members[k];
    GenerationSequence& s = *r.seq;
    const std::span<const float> rows = failure.empty() ? logits.subspan(row * vocab, steps[k].logit_rows * vocab)
                                                        : std::span<const float>{};
    row += steps[k].logit_rows;
    if (!failure.empty()) {
      s.finish(StopReason::Callback);
      r.job->finish(s.result(), failure);
      continue;
    }
    if (s.result().tokens.empty()) stats_.prompt_tokens_run += steps[k].ids.size();
    std::optional<GenerationSequence::Sampled> made;
    try {
      made = s.advance(rows, lm_.tokenizer());
    } catch (const std::exception& e) {  // this request cannot go on; the others do
      r.error = e.what();
      s.finish(StopReason::Callback);
      continue;
    }
    if (made && made->token >= 0) {
      const GenerationResult& so_far = s.result();
      r.job->push(made->text, 1, so_far.logprobs.empty() ? nullptr : &so_far.logprobs.back(),
                  so_far.tokens.size() == 1 && !so_far.prompt_logprobs.empty() ? &so_far.prompt_logprobs : nullptr);
    }
  }
  // Finished (or failed) sequences leave now: their jobs end, and their places are free for the next step.
  std::vector<Running*> leaving;
  if (!failure.empty()) leaving = members;
  for (auto& r : running_)
    if (failure.empty() && r->seq->done()) leaving.push_back(r.get());
  if (failure.empty())
    for (Running* r : leaving) retire(*r);
  std::erase_if(running_, [&](const std::unique_ptr<Running>& r) {
    return std::find(leaving.begin(), leaving.end(), r.get()) != leaving.end();
  });
  return true;
}

void Scheduler::loop() {
  executor_ = std::make_unique<Executor>(lm_.shared_model());
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty() || !running_.empty(); });
      if (stop_) break;
      if (!draining_ || SteadyClock::now() < deadline_) admit(lock);
    }
    step();
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty() && running_.empty()) idle_.notify_all();
    }
  }
  std::lock_guard lock(mutex_);
  for (auto& r : running_) {
    r->seq->finish(StopReason::Callback);
    retire(*r);
  }
  running_.clear();
  drop_queue();
  idle_.notify_all();
}

}  // namespace mmgpt
