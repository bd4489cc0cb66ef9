#pragma once
// The server's counters, rendered in Prometheus' text format for GET /metrics.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/scheduler.hpp"

namespace mmgpt::server {

class Metrics {
 public:
  void count_response(int status);
  void count_tokens(size_t prompt, size_t generated);
  void observe_first_token(double seconds);  // from the request's arrival
  void observe_token_interval(double seconds);  // a request's mean time between tokens after the first
  std::string render(const SchedulerStats& scheduler) const;

 private:
  struct Histogram {
    static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                       0.25,  0.5,    1,     2.5,  5,     10,  30};
    std::array<uint64_t, kBounds.size()> counts{};  // observations <= each bound (not cumulative here)
    uint64_t count = 0;
    double sum = 0;
    void observe(double v);
    void render(std::string& out, const char* name, const char* help) const;
  };
  mutable std::mutex mutex_;
  std::map<int, uint64_t> responses_;
  uint64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  Histogram first_token_, token_interval_;
};

}  // namespace mmgpt::server
