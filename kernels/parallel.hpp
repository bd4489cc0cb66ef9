#pragma once
// mmgpt's one way into tbb::parallel_for. Identical to calling it directly,
// except under ThreadSanitizer (-DMMGPT_SANITIZE=thread, see
// docs/sanitizers.md): there it also tells TSan about the two orderings TBB
// guarantees and TSan cannot see, because Debian's libtbb is not instrumented
// and hands tasks between threads through its own atomics:
//   fork: everything the caller did before parallel_for happens before every
//         call of the body;
//   join: every call of the body happens before parallel_for returns.
// With those edges stated, a TSan report whose top frame is in mmgpt code is
// a real race in mmgpt. (The remaining reports on TBB's own task objects are
// suppressed by tests/sanitizers/tsan.supp.)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#if defined(__SANITIZE_THREAD__)
#define MMGPT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MMGPT_TSAN 1
#endif
#endif
#ifdef MMGPT_TSAN
#include <sanitizer/tsan_interface.h>
// Dynamic annotations from the TSan runtime (GCC's and Clang's export them).
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

namespace mmgpt {

// Threads the work started here may run on: the task arena's concurrency,
// capped by tbb::global_control (`--threads`, `bench -t`). At least 1.
inline size_t thread_budget() {
  return std::max<size_t>(
      1, std::min<size_t>(tbb::this_task_arena::max_concurrency(),
                          tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)));
}

// Records when each body call of every parallel_for ran, and on which of the
// task arena's threads, while installed (`mmgpt bench --trace`). A slot per
// thread index, each written only by its thread, read after the loops joined.
class TaskRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  struct Span {
    Clock::time_point t0, t1;
  };
  explicit TaskRecorder(size_t threads) : slots_(std::max<size_t>(threads, 1)) {
    for (auto& s : slots_) s.reserve(1 << 14);
  }
  void record(Clock::time_point t0) {
    const int slot = tbb::this_task_arena::current_thread_index();
    if (slot >= 0 && static_cast<size_t>(slot) < slots_.size()) slots_[slot].push_back({t0, Clock::now()});
  }
  const std::vector<std::vector<Span>>& slots() const { return slots_; }
  void clear() {
    for (auto& s : slots_) s.clear();
  }

  // The installed recorder (null: none); install with nothing running.
  static TaskRecorder* active() { return active_.load(std::memory_order_relaxed); }
  static void install(TaskRecorder* r) { active_.store(r, std::memory_order_release); }

 private:
  std::vector<std::vector<Span>> slots_;
  static inline std::atomic<TaskRecorder*> active_{nullptr};
};

namespace detail {

template <class Range, class Body, class Partitioner>
void parallel_for_untraced(const Range& range, const Body& body, const Partitioner& partitioner) {
#ifdef MMGPT_TSAN
  char fork = 0, join = 0;
  __tsan_release(&fork);
  tbb::parallel_for(
      range,
      [&](const Range& r) {
        // TBB copies this closure and the range into its task objects after the
        // release above, on the calling thread: reading those copies before the
        // acquire would look like a race. Load them with reads ignored, then
        // acquire, and touch only the caller's own objects after.
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
        char* const f = &fork;
        char* const j = &join;
        const Body* const b = &body;
        const Range local = r;
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
        __tsan_acquire(f);
        (*b)(local);
        __tsan_release(j);
      },
      partitioner);
  __tsan_acquire(&join);
#else
  tbb::parallel_for(range, body, partitioner);
#endif
}

}  // namespace detail

// Call it qualified, mmgpt::parallel_for: unqualified, argument-dependent lookup
// also finds tbb::parallel_for, whose non-template partitioner overloads win.
template <class Range, class Body, class Partitioner>
void parallel_for(const Range& range, const Body& body, const Partitioner& partitioner) {
  if (TaskRecorder* rec = TaskRecorder::active()) [[unlikely]] {
    detail::parallel_for_untraced(
        range,
        [&](const Range& r) {
          const TaskRecorder::Clock::time_point t0 = TaskRecorder::Clock::now();
          body(r);
          rec->record(t0);
        },
        partitioner);
    return;
  }
  detail::parallel_for_untraced(range, body, partitioner);
}

}  // namespace mmgpt
