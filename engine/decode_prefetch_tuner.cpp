#include "engine/decode_prefetch_tuner.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <utility>

#include "kernels/parallel.hpp"

namespace mmgpt {

using kernels::DecodePrefetch;

namespace {

// At least one pair, and a longest wait no shorter than the shortest.
DecodePrefetchTuner::Params sane(DecodePrefetchTuner::Params p) {
  p.pairs = std::max<size_t>(p.pairs, 1);
  p.max_period = std::max(p.max_period, p.min_period);
  return p;
}

// A comparison whose owner has run this few of its steps while others ran
// this many times as many is dropped: its owner stopped decoding (and was
// not forgotten), and others may compare.
constexpr size_t kForeignStepsPerOwn = 4;
constexpr size_t kForeignStepsMin = 64;

}  // namespace

DecodePrefetchTuner::DecodePrefetchTuner(DecodePrefetch start, DecodePrefetch other, Params params)
    : params_(sane(params)), choice_(start), other_(other), first_left_(params_.first), period_(params_.min_period) {
  ratios_.reserve(params_.pairs);
}

DecodePrefetch DecodePrefetchTuner::expected() const {
  // Pair i: a block of the other hint, then one of the choice, when i is
  // even; the other way round when odd.
  const bool other_first = (block_ / 2) % 2 == 0, second = block_ % 2 == 1;
  return other_first != second ? other_ : choice_;
}

DecodePrefetch DecodePrefetchTuner::next(const void* owner) {
  std::lock_guard lock(mutex_);
  if (owner_ == nullptr && first_left_ == 0 && wait_left_ <= 0.0) {
    owner_ = owner;
    block_ = in_block_ = timed_steps_ = own_steps_ = foreign_steps_ = 0;
    timed_seconds_ = 0.0;
    ratios_.clear();
  }
  return owner_ == owner ? expected() : choice_;
}

void DecodePrefetchTuner::record(const void* owner, DecodePrefetch used, double seconds) {
  std::lock_guard lock(mutex_);
  if (owner_ == nullptr) {
    if (first_left_ > 0)
      --first_left_;
    else
      wait_left_ -= seconds;
    return;
  }
  if (owner_ != owner) {
    if (++foreign_steps_ > std::max(kForeignStepsMin, kForeignStepsPerOwn * own_steps_)) owner_ = nullptr;
    return;
  }
  if (used != expected()) return;  // not the step next() gave (the setting moved meanwhile)
  ++own_steps_;
  if (++in_block_ <= params_.settle) return;
  timed_seconds_ += seconds;
  ++timed_steps_;
  if (timed_seconds_ < params_.block_seconds) return;

  // The block's end: its mean step time.
  const double mean = timed_seconds_ / static_cast<double>(timed_steps_);
  if (block_ % 2 == 0) {
    first_of_pair_ = mean;
  } else {
    const bool other_first = (block_ / 2) % 2 == 0;
    const double t_other = other_first ? first_of_pair_ : mean, t_choice = other_first ? mean : first_of_pair_;
    ratios_.push_back(t_choice > 0 ? t_other / t_choice : 1.0);
  }
  in_block_ = timed_steps_ = 0;
  timed_seconds_ = 0.0;
  if (++block_ == 2 * params_.pairs) decide();
}

void DecodePrefetchTuner::decide() {
  // The median of the pairs' ratios.
  std::sort(ratios_.begin(), ratios_.end());
  const size_t n = ratios_.size();
  const double median = n % 2 ? ratios_[n / 2] : 0.5 * (ratios_[n / 2 - 1] + ratios_[n / 2]);
  ++counts_.comparisons;
  if (median < 1.0 - params_.margin) {
    std::swap(choice_, other_);
    ++counts_.switches;
    period_ = params_.min_period;
  } else {
    period_ = std::min(2 * period_, params_.max_period);
  }
  wait_left_ = period_;
  owner_ = nullptr;
}

void DecodePrefetchTuner::forget(const void* owner) {
  std::lock_guard lock(mutex_);
  if (owner_ == owner) owner_ = nullptr;  // the wait is over: the next step starts a new comparison
}

DecodePrefetch DecodePrefetchTuner::choice() const {
  std::lock_guard lock(mutex_);
  return choice_;
}

DecodePrefetchTuner::Counts DecodePrefetchTuner::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

namespace {

std::array<std::atomic<size_t>, std::tuple_size_v<DecodePrefetchSteps>> g_steps{};

// The process's tuners, by thread budget and batch size (never removed:
// references stay valid).
struct Tuners {
  std::mutex mutex;
  std::map<std::pair<size_t, size_t>, std::unique_ptr<DecodePrefetchTuner>> by_shape;
};
Tuners& tuners() {
  static Tuners t;
  return t;
}

}  // namespace

DecodePrefetchTuner& decode_prefetch_tuner(size_t threads, size_t sequences) {
  Tuners& all = tuners();
  std::lock_guard lock(all.mutex);
  std::unique_ptr<DecodePrefetchTuner>& t = all.by_shape[{threads, sequences}];
  if (!t)
    t = std::make_unique<DecodePrefetchTuner>(kernels::decode_prefetch_for_vendor(kernels::cpu_vendor()),
                                              DecodePrefetch::None, DecodePrefetchTuner::Params{});
  return *t;
}

std::string describe_decode_prefetch() {
  if (!kernels::decode_prefetch_auto()) return std::string(kernels::decode_prefetch_name());
  const std::string vendor(kernels::decode_prefetch_name(kernels::decode_prefetch_for_vendor(kernels::cpu_vendor())));
  return "auto (" + vendor + " or none, by timing decode steps)";
}

void forget_decode_prefetch_owner(const void* owner) {
  Tuners& all = tuners();
  std::lock_guard lock(all.mutex);
  for (auto& [shape, t] : all.by_shape) t->forget(owner);
}

DecodePrefetchSteps decode_prefetch_steps() {
  DecodePrefetchSteps n{};
  for (size_t i = 0; i < n.size(); ++i) n[i] = g_steps[i].load(std::memory_order_relaxed);
  return n;
}

std::string describe_decode_prefetch_steps(const DecodePrefetchSteps& steps) {
  std::string s;
  for (size_t h = 0; h < steps.size(); ++h)
    if (steps[h] > 0)
      s += (s.empty() ? "" : ", ") + std::string(kernels::decode_prefetch_name(DecodePrefetch(h))) + " " +
           std::to_string(steps[h]);
  return s;
}

TunedDecodeStep::TunedDecodeStep(const void* owner, size_t sequences)
    : owner_(owner),
      tuner_(kernels::decode_prefetch_auto() ? &decode_prefetch_tuner(thread_budget(), sequences) : nullptr),
      hint_(kernels::decode_prefetch()) {
  if (tuner_) {
    hint_ = tuner_->next(owner_);
    kernels::use_decode_prefetch(hint_);
  }
  start_ = std::chrono::steady_clock::now();
}

void TunedDecodeStep::done() {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  g_steps[static_cast<size_t>(hint_)].fetch_add(1, std::memory_order_relaxed);
  if (tuner_) tuner_->record(owner_, hint_, seconds);
}

}  // namespace mmgpt
