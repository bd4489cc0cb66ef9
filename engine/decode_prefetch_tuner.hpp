#pragma once
// Chooses the decode kernels' prefetch hint while decoding, by timing steps.
//
// Which hint streams the weights fastest depends on the CPU (the vendor's
// hint, kernels/dispatch.cpp) and, on a shared host, on the moment: with the
// core to itself a decode kernel needs software prefetches to keep enough
// lines in flight; when another tenant shares the core, the same prefetches
// cost more than they bring and no prefetch at all is faster (docs/kernels.md,
// "Decode: prefetching ahead, and the hint per CPU"). So while the setting is
// "auto" (kernels::decode_prefetch_auto()) the engine compares the vendor's
// hint with none every so often and keeps the faster.
//
// A comparison runs `pairs` pairs of blocks of decode steps, each pair a
// block with each hint back to back (the order alternating from pair to
// pair, so a context that grows by one each step favours neither), and takes
// the median over the pairs of the ratio of the blocks' mean step times:
// steps next to each other see the same host, which whole runs do not. A
// block's first `settle` steps are not timed (a step right after one with
// the other hint finds the caches as that one left them); then its steps are
// timed until they add up to `block_seconds`, so a model whose steps take
// microseconds (weights in cache) is compared over many steps and one whose
// steps take milliseconds over one. The other hint is taken when the median
// ratio is below 1 - `margin`. The next comparison comes after `min_period`
// seconds of decode steps after a switch, and each comparison that keeps the
// choice doubles the wait, up to `max_period`, so once the choice holds the
// comparisons cost a small share of the time even when the hint not chosen
// is much slower. The hint never changes a result (every decode loop gives
// the same bits under each: tests/test_kernels_dispatch.cpp), only the speed.
//
// One tuner serves the process for each thread budget and batch size (the
// host is the process's; one thread and two share the memory differently,
// and the kernels do more arithmetic a line for each row of a batch, which
// can change which hint is faster: docs/kernels.md, "Small batches stream
// like decode"); its comparisons belong to one caller (an Executor) at a
// time, and other callers' steps meanwhile run with the current choice and
// are not timed. Decodes running at once share the kernels' hint, so one can
// run part of a step of another's comparison with the other hint: a choice
// made wrong that way is undone at a later comparison.
#include <array>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/decode_prefetch_kind.hpp"

namespace mmgpt {

class DecodePrefetchTuner {
 public:
  struct Params {
    size_t first = 4;             // steps before the first comparison
    size_t pairs = 4;             // pairs of blocks a comparison times
    size_t settle = 1;            // untimed steps at the start of each block
    double block_seconds = 5e-4;  // a block's timed steps add up to at least this
    double min_period = 0.25;     // seconds of decode from a switch to the next comparison
    double max_period = 8.0;      // the longest wait between comparisons
    double margin = 0.02;         // how much faster the other hint must be to switch
  };
  struct Counts {
    size_t comparisons = 0;
    size_t switches = 0;
  };

  DecodePrefetchTuner(kernels::DecodePrefetch start, kernels::DecodePrefetch other, Params params);

  // The hint for `owner`'s next decode step.
  kernels::DecodePrefetch next(const void* owner);
  // `owner`'s step that next() gave `used` took `seconds`.
  void record(const void* owner, kernels::DecodePrefetch used, double seconds);
  // Ends `owner`'s comparison, if it has one (an Executor going away).
  void forget(const void* owner);

  kernels::DecodePrefetch choice() const;
  Counts counts() const;

 private:
  kernels::DecodePrefetch expected() const;  // the hint of the comparison's next step
  void decide();                             // after the last block of a comparison

  const Params params_;
  mutable std::mutex mutex_;
  kernels::DecodePrefetch choice_, other_;
  size_t first_left_;                         // steps before the first comparison
  double period_, wait_left_ = 0.0;           // seconds between comparisons, and before the next
  const void* owner_ = nullptr;               // whose comparison is running (null: none)
  size_t block_ = 0;                          // the comparison's current block
  size_t in_block_ = 0;                       // steps of it so far (the first `settle` untimed)
  size_t timed_steps_ = 0;                    // its timed steps
  double timed_seconds_ = 0.0;                // and their time
  double first_of_pair_ = 0.0;                // mean step time of the pair's first block
  size_t own_steps_ = 0, foreign_steps_ = 0;  // the owner's and others' steps since it began
  std::vector<double> ratios_;                // other / choice, one per pair
  Counts counts_;
};

// The process's tuner for decode steps of `sequences` sequences (one new
// token each) on `threads` threads: the CPU vendor's hint against none.
DecodePrefetchTuner& decode_prefetch_tuner(size_t threads, size_t sequences = 1);

// The setting in words: a fixed hint's name, or "auto (nta or none, by
// timing decode steps)" with this CPU's hint.
std::string describe_decode_prefetch();

// Ends `owner`'s comparison in every tuner (an Executor going away).
void forget_decode_prefetch_owner(const void* owner);

// Steps counted by hint, indexed by DecodePrefetch value.
using DecodePrefetchSteps = std::array<size_t, 3>;

// Decode steps (one new token for each sequence of the step) the process
// has run with each hint, tuned or not: what `mmgpt bench` and `--stats`
// report.
DecodePrefetchSteps decode_prefetch_steps();
// "nta 12, none 370": the hints with any steps, in enum order.
std::string describe_decode_prefetch_steps(const DecodePrefetchSteps& steps);

// One decode step of `sequences` sequences under their tuner: the
// constructor picks the hint (and sets it for the kernels while the setting
// is auto), done() records the step's time. A step that throws is not
// recorded.
class TunedDecodeStep {
 public:
  TunedDecodeStep(const void* owner, size_t sequences);
  void done();

 private:
  const void* owner_;
  DecodePrefetchTuner* tuner_;  // null when the setting is fixed
  kernels::DecodePrefetch hint_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mmgpt
