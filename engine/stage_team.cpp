#include "engine/stage_team.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include <tbb/blocked_range.h>
#include <tbb/partitioner.h>

#include "engine/even_split.hpp"
#include "kernels/decode_prefetch.hpp"
#include "kernels/parallel.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace mmgpt {
namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Until `done` reaches `parts`. Stages take microseconds, so spin; past a few
// thousand rounds the other member is probably descheduled (a shared host),
// so give the core away between looks. But first, while there is any, the
// member prefetches what it reads next (run_stages' next_reads for `stage`),
// four lines between looks, and does not count those rounds as spins.
void wait_for(const std::atomic<uint32_t>& done, uint32_t parts, const StageReads* reads, size_t stage, size_t member) {
  constexpr size_t kLine = 64, kLinesPerLook = 4;
  size_t run = 0, at = 0, requested = 0;
  auto next_run = [&]() -> std::span<const std::byte> {
    if (reads == nullptr || requested >= kStagePrefetchCap) return {};
    const std::span<const std::byte> r = (*reads)(stage, member, run++);
    return r.first(std::min(r.size(), kStagePrefetchCap - requested));
  };
  // With the decode kernels' prefetch hint, chosen once for the wait; with
  // none, the member only waits (and asks for nothing).
  kernels::detail::with_decode_hint([&](auto hint) {
    constexpr kernels::DecodePrefetch H = decltype(hint)::value;
    std::span<const std::byte> ahead;
    if constexpr (H != kernels::DecodePrefetch::None) ahead = next_run();
    for (unsigned spins = 0; done.load(std::memory_order_acquire) < parts; ++spins) {
      if (!ahead.empty() && at >= ahead.size()) ahead = next_run(), at = 0;
      if (at < ahead.size()) {
        for (size_t k = 0; k < kLinesPerLook && at < ahead.size(); ++k, at += kLine, requested += kLine)
          kernels::detail::prefetch_hinted<H>(ahead.data(), at);
        spins = 0;
      } else if (spins < 4096) {
        cpu_relax();
      } else {
        std::this_thread::yield();
      }
    }
  });
}

}  // namespace

std::pair<size_t, size_t> stage_own_block(size_t parts, size_t members, size_t m) {
  return {even_split_begin(parts, members, m), even_split_begin(parts, members, m + 1)};
}

size_t stage_part_order(size_t parts, size_t members, size_t m, size_t k) {
  const auto [first, end] = stage_own_block(parts, members, m);
  if (k < end - first) return first + k;
  k -= end - first;
  for (size_t r = 1; r < members; ++r) {
    const size_t b = (m + r) % members;
    const auto [begin, stop] = stage_own_block(parts, members, b);
    if (k < stop - begin) return stop - 1 - k;
    k -= stop - begin;
  }
  return parts;  // k >= parts: not reached by run_stages
}

void run_stages(std::span<const uint32_t> parts, size_t members,
                const std::function<void(size_t, size_t, size_t)>& work, const StageReads& next_reads) {
  if (parts.empty()) return;
  members = members == 0 ? 1 : members;
  // Claim flags of every part, and per stage the count of finished parts;
  // zero-initialized (value-initialized atomics), fresh for each step.
  std::unique_ptr<size_t[]> first(new size_t[parts.size()]);
  size_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) first[i] = total, total += parts[i];
  const std::unique_ptr<std::atomic<uint8_t>[]> claimed(new std::atomic<uint8_t>[total]());
  const std::unique_ptr<std::atomic<uint32_t>[]> done(new std::atomic<uint32_t>[parts.size()]());

  auto member = [&](size_t m) {
    for (size_t i = 0; i < parts.size(); ++i) {
      const size_t n = parts[i];
      if (n == 0) continue;  // folded into the next stage by the caller
      uint32_t ran = 0;
      for (size_t k = 0; k < n; ++k) {
        const size_t p = stage_part_order(n, members, m, k);
        // Relaxed: the claim only decides who runs the part; the stage's
        // inputs were published by the previous stage's `done` (acquire below).
        if (claimed[first[i] + p].exchange(1, std::memory_order_relaxed) != 0) continue;
        work(i, p, m);
        ++ran;
      }
      if (ran != 0) done[i].fetch_add(ran, std::memory_order_release);
      if (done[i].load(std::memory_order_acquire) >= n) continue;
      size_t j = i + 1;
      while (j < parts.size() && parts[j] == 0) ++j;
      wait_for(done[i], static_cast<uint32_t>(n), next_reads && j < parts.size() ? &next_reads : nullptr, j, m);
    }
  };
  if (members == 1) return member(0);
  mmgpt::parallel_for(
      tbb::blocked_range<size_t>(0, members, 1),
      [&](const tbb::blocked_range<size_t>& r) {
        for (size_t m = r.begin(); m < r.end(); ++m) member(m);
      },
      tbb::simple_partitioner());
}

}  // namespace mmgpt
