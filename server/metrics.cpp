#include "server/metrics.hpp"

#include <cstdio>

namespace mmgpt::server {

namespace {

void line(std::string& out, const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  out += buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  line(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

}  // namespace

void Metrics::Histogram::observe(double v) {
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (v <= kBounds[i]) {
      ++counts[i];
      break;
    }
  ++count;
  sum += v;
}

void Metrics::Histogram::render(std::string& out, const char* name, const char* help) const {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += counts[i];
    line(out, "%s_bucket{le=\"%g\"} %llu\n", name, kBounds[i], static_cast<unsigned long long>(cumulative));
  }
  line(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, static_cast<unsigned long long>(count),
       name, sum, name, static_cast<unsigned long long>(count));
}

void Metrics::count_response(int status) {
  std::lock_guard lock(mutex_);
  ++responses_[status];
}

void Metrics::count_tokens(size_t prompt, size_t generated) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

void Metrics::observe_first_token(double seconds) {
  std::lock_guard lock(mutex_);
  first_token_.observe(seconds);
}

void Metrics::observe_token_interval(double seconds) {
  std::lock_guard lock(mutex_);
  token_interval_.observe(seconds);
}

std::string Metrics::render(const SchedulerStats& s) const {
  std::lock_guard lock(mutex_);
  std::string out;
  header(out, "mmgpt_requests_total", "counter", "HTTP responses sent, by status code.");
  for (const auto& [status, n] : responses_)
    line(out, "mmgpt_requests_total{status=\"%d\"} %llu\n", status, static_cast<unsigned long long>(n));
  header(out, "mmgpt_prompt_tokens_total", "counter", "Prompt tokens of finished completions.");
  line(out, "mmgpt_prompt_tokens_total %llu\n", static_cast<unsigned long long>(prompt_tokens_));
  header(out, "mmgpt_generated_tokens_total", "counter", "Tokens generated for finished completions.");
  line(out, "mmgpt_generated_tokens_total %llu\n", static_cast<unsigned long long>(generated_tokens_));
  header(out, "mmgpt_prompt_tokens_cached_total", "counter", "Prompt tokens whose keys and values came from the prefix cache.");
  line(out, "mmgpt_prompt_tokens_cached_total %llu\n", static_cast<unsigned long long>(s.prompt_tokens_reused));
  header(out, "mmgpt_sequences_running", "gauge", "Sequences in the running batch.");
  line(out, "mmgpt_sequences_running %zu\n", s.running);
  header(out, "mmgpt_sequences_queued", "gauge", "Requests waiting for a place in the batch.");
  line(out, "mmgpt_sequences_queued %zu\n", s.queued);
  header(out, "mmgpt_batch_size", "gauge", "Sequences in the latest engine step.");
  line(out, "mmgpt_batch_size %zu\n", s.last_batch);
  header(out, "mmgpt_steps_total", "counter", "Engine steps run (each one batch through the model).");
  line(out, "mmgpt_steps_total %llu\n", static_cast<unsigned long long>(s.steps));
  header(out, "mmgpt_step_seconds_total", "counter", "Time spent in engine steps.");
  line(out, "mmgpt_step_seconds_total %.6f\n", s.step_seconds);
  header(out, "mmgpt_step_sequences_total", "counter",
         "Sequences summed over engine steps (divided by mmgpt_steps_total: the mean batch size).");
  line(out, "mmgpt_step_sequences_total %llu\n", static_cast<unsigned long long>(s.step_sequences));
  first_token_.render(out, "mmgpt_time_to_first_token_seconds", "From a request's arrival to its first token.");
  token_interval_.render(out, "mmgpt_time_per_output_token_seconds",
                         "A request's mean time between tokens after its first.");
  return out;
}

}  // namespace mmgpt::server
