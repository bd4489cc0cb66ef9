#pragma once
// The machine's own limits, measured in the process that reports figures
// against them: read bandwidth from memory (buffers far past the last-level
// cache), peak fp32 FMA throughput, peak int8 dot-product throughput and,
// where the CPU has AMX tiles, the peak of the tile products.
// Header-only so that the Google
// Benchmark programs in bench/ and `mmgpt bench` (tools/cli) share one
// measurement without a library of their own.
//
// Bandwidth: each of `threads` std::threads reads its own contiguous slice of
// the buffer with vector loads (XOR-folded so the loads cannot be elided);
// the figure is the best of `passes` full passes (a limit is what the machine
// can do, so noise from other processes should not lower it).
// Memory kinds: anonymous memory advised MADV_HUGEPAGE (4 KiB pages read
// markedly slower on some machines, through TLB misses), or a file mapped from
// the page cache, which is how .mmgpt weights are read.
//
// FMA peak: independent FMA chains held in registers, enough of them to
// cover the FMA latency times the number of FMA pipes on current x86 cores;
// compiled per ISA with target attributes and chosen at run time, so this
// header needs no ISA flags and runs on any x86-64 (and falls back to plain
// C++ elsewhere).
//
// AMX peak (x86-64 with AMX-TILE, Linux): TDPBF16PS / TDPBSSD on four
// independent accumulator tiles, each thread with its own tile configuration;
// 0 where the CPU or OS has no usable tiles (amx_support says which part).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/platform.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define MMGPT_LIMITS_X86 1
#endif

namespace mmgpt::limits {

// A read-only buffer of `bytes`, page-aligned, released on destruction.
class ReadBuffer {
 public:
  enum class Kind { AnonHugePages, FileMapped };

  // FileMapped writes a temporary file in `dir` (unlinked at once) and maps it;
  // its pages are then in the page cache, as a model's are after the first run.
  ReadBuffer(size_t bytes, Kind kind, const std::string& dir = "/tmp") : bytes_(round_up(bytes)), kind_(kind) {
    if (kind == Kind::AnonHugePages) {
      void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::runtime_error("bandwidth probe: cannot map " + std::to_string(bytes_) + " bytes");
      platform::advise_huge_pages(p, bytes_);  // advisory: ignored where THP is off
      data_ = p;
      fill(static_cast<unsigned char*>(p));
      return;
    }
    std::string path = dir + "/mmgpt-bw-XXXXXX";
    const int fd = ::mkstemp(path.data());
    if (fd < 0) throw std::runtime_error("bandwidth probe: cannot create a temporary file in " + dir);
    ::unlink(path.c_str());  // gone when the mapping and descriptor are
    std::vector<unsigned char> chunk(size_t{1} << 20);
    fill(chunk.data(), chunk.size());
    for (size_t done = 0; done < bytes_;) {
      const size_t want = std::min(chunk.size(), bytes_ - done);
      const ssize_t n = ::write(fd, chunk.data(), want);
      if (n <= 0) {
        ::close(fd);
        throw std::runtime_error("bandwidth probe: cannot write the temporary file in " + dir);
      }
      done += static_cast<size_t>(n);
    }
    void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("bandwidth probe: cannot map the temporary file");
    data_ = p;
  }
  ReadBuffer(const ReadBuffer&) = delete;
  ReadBuffer& operator=(const ReadBuffer&) = delete;
  ~ReadBuffer() { ::munmap(data_, bytes_); }

  const unsigned char* data() const { return static_cast<const unsigned char*>(data_); }
  size_t size() const { return bytes_; }
  const char* describe() const {
    return kind_ == Kind::AnonHugePages ? "anonymous memory, MADV_HUGEPAGE" : "mmapped file in the page cache";
  }

 private:
  static size_t round_up(size_t b) { return (std::max<size_t>(b, 1 << 20) + (1 << 21) - 1) & ~size_t((1 << 21) - 1); }
  // Non-zero, non-repeating bytes: a zero page could be deduplicated or compressed.
  void fill(unsigned char* p) const { fill(p, bytes_); }
  static void fill(unsigned char* p, size_t n) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i + 8 <= n; i += 8) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      std::memcpy(p + i, &x, 8);
    }
  }
  void* data_ = nullptr;
  size_t bytes_;
  Kind kind_;
};

namespace detail {

#ifdef MMGPT_LIMITS_X86
__attribute__((target("avx2"))) inline uint64_t read_avx2(const unsigned char* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 3));
}
inline uint64_t read_sse2(const unsigned char* p, size_t n) {
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm_xor_si128(a0, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i)));
    a1 = _mm_xor_si128(a1, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    a2 = _mm_xor_si128(a2, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    a3 = _mm_xor_si128(a3, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  const __m128i a = _mm_xor_si128(_mm_xor_si128(a0, a1), _mm_xor_si128(a2, a3));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(a));
}
#endif

inline uint64_t read_slice(const unsigned char* p, size_t n) {
#ifdef MMGPT_LIMITS_X86
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2 ? read_avx2(p, n) : read_sse2(p, n);
#else
  uint64_t a[4] = {0, 0, 0, 0};
  for (size_t i = 0; i + 32 <= n; i += 32)
    for (int j = 0; j < 4; ++j) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * j, 8);
      a[j] ^= v;
    }
  return a[0] ^ a[1] ^ a[2] ^ a[3];
#endif
}

// Runs fn(thread_index) on `threads` threads started together; returns the
// wall time from the common start to the last finish.
template <class Fn>
double timed_parallel(unsigned threads, Fn fn) {
  std::atomic<unsigned> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      fn(t);
    });
  while (ready.load() < threads) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline std::atomic<uint64_t> sink{0};  // keeps the folded reads alive

}  // namespace detail

// Whether evict_from_caches can evict (x86); elsewhere it does nothing.
#ifdef MMGPT_LIMITS_X86
inline constexpr bool kCanEvictCaches = true;
#else
inline constexpr bool kCanEvictCaches = false;
#endif

// Drops the lines of [data, data + bytes) from every level of the CPU's
// caches, so that the next read of them is served by memory: CLFLUSH (SSE2,
// every x86-64) on each 64-byte line. Elsewhere (kCanEvictCaches false) it
// does nothing.
inline void evict_from_caches(const void* data, size_t bytes) {
#ifdef MMGPT_LIMITS_X86
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; i += 64) _mm_clflush(p + i);
  if (bytes) _mm_clflush(p + bytes - 1);  // the last line, when data is not line-aligned
  _mm_mfence();
#else
  (void)data, (void)bytes;
#endif
}

// Best read bandwidth in GB/s (1e9 bytes/s) over `passes` passes of the
// `bytes` at `data` (64-byte aligned), split evenly over `threads` threads.
// A small buffer is read several times per pass (at least 64 MiB in all), so
// starting the threads does not dominate; it then measures the cache it sits in.
// from_memory: each pass starts with the buffer evicted from the caches
// (evict_from_caches, x86), so a buffer a few times the last-level cache is
// not partly served by the cache on the second pass: the pass measures memory.
inline double read_bandwidth_gbps(const unsigned char* data, size_t bytes, unsigned threads, int passes = 3,
                                  bool from_memory = false) {
  threads = std::max(1u, threads);
  const size_t slice = std::max<size_t>((bytes / threads) & ~size_t(127), 128);
  if (slice * threads > bytes) return 0;  // under 128 bytes per thread: nothing to measure
  const size_t repeats = std::max<size_t>(1, (size_t{64} << 20) / (slice * threads));
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    if (from_memory) evict_from_caches(data, slice * threads);
    const double s = detail::timed_parallel(threads, [&](unsigned t) {
      for (size_t r = 0; r < repeats; ++r)
        detail::sink.fetch_xor(detail::read_slice(data + t * slice, slice), std::memory_order_relaxed);
    });
    best = std::max(best, double(slice) * threads * double(repeats) / s * 1e-9);
  }
  return best;
}

inline double read_bandwidth_gbps(const ReadBuffer& buf, unsigned threads, int passes = 3) {
  return read_bandwidth_gbps(buf.data(), buf.size(), threads, passes);
}

namespace detail {

// acc = acc * m + c on independent register chains; returns a value depending
// on every chain so nothing is dead code. Flops per call: 2 * lanes * chains * iters.
#ifdef MMGPT_LIMITS_X86
#define MMGPT_FMA_STEP(FMA, a) a = FMA(a, m, c)
__attribute__((target("avx2,fma"))) inline float fma_chains_avx2(uint64_t iters) {
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  // Distinct starting values: identical chains would be merged by the
  // compiler into one, which would overstate the peak.
  __m256 a0 = _mm256_set1_ps(1.000f), a1 = _mm256_set1_ps(1.001f), a2 = _mm256_set1_ps(1.002f),
         a3 = _mm256_set1_ps(1.003f), a4 = _mm256_set1_ps(1.004f), a5 = _mm256_set1_ps(1.005f),
         a6 = _mm256_set1_ps(1.006f), a7 = _mm256_set1_ps(1.007f), a8 = _mm256_set1_ps(1.008f),
         a9 = _mm256_set1_ps(1.009f), a10 = _mm256_set1_ps(1.010f),
         a11 = _mm256_set1_ps(1.011f);  // 12 chains >= 4-cycle latency x 2 FMA pipes (+ slack)
  for (uint64_t i = 0; i < iters; ++i) {
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a0);
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a1);
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a2);
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a3);
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a4);
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a5);
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a6);
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a7);
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a8);
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a9);
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a10);
    MMGPT_FMA_STEP(_mm256_fmadd_ps, a11);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}
__attribute__((target("avx512f"))) inline float fma_chains_avx512(uint64_t iters) {
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  __m512 a0 = _mm512_set1_ps(1.000f), a1 = _mm512_set1_ps(1.001f), a2 = _mm512_set1_ps(1.002f),
         a3 = _mm512_set1_ps(1.003f), a4 = _mm512_set1_ps(1.004f), a5 = _mm512_set1_ps(1.005f),
         a6 = _mm512_set1_ps(1.006f), a7 = _mm512_set1_ps(1.007f), a8 = _mm512_set1_ps(1.008f),
         a9 = _mm512_set1_ps(1.009f), a10 = _mm512_set1_ps(1.010f), a11 = _mm512_set1_ps(1.011f);
  for (uint64_t i = 0; i < iters; ++i) {
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a0);
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a1);
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a2);
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a3);
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a4);
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a5);
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a6);
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a7);
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a8);
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a9);
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a10);
    MMGPT_FMA_STEP(_mm512_fmadd_ps, a11);
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  alignas(64) float out[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside its expansion
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}
#undef MMGPT_FMA_STEP
#endif

// Portable fallback (SSE2 mul+add on x86 without FMA; NEON fma on aarch64 at -O2+).
inline float fma_chains_generic(uint64_t iters) {
  float a[12][4];
  for (int c = 0; c < 12; ++c)  // distinct values, so no two chains can be merged
    for (int l = 0; l < 4; ++l) a[c][l] = 1.0f + 0.001f * float(c) + 0.0001f * float(l);
  for (uint64_t i = 0; i < iters; ++i)
    for (auto& r : a)
      for (float& x : r) x = x * 0.999999f + 1e-7f;
  float s = 0;
  for (auto& r : a) s += r[0] + r[3];
  return s;
}

}  // namespace detail

struct FmaPath {
  const char* isa;
  unsigned lanes;  // fp32 lanes per vector
  float (*run)(uint64_t);
};

// The widest FMA path the CPU has. On x86 AVX-512 is preferred where present
// (no slower for fp32 than AVX2, and twice as fast on cores with two 512-bit
// FMA units).
inline FmaPath best_fma_path() {
#ifdef MMGPT_LIMITS_X86
  if (__builtin_cpu_supports("avx512f")) return {"avx512", 16, detail::fma_chains_avx512};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {"avx2+fma", 8, detail::fma_chains_avx2};
#endif
  return {"generic", 4, detail::fma_chains_generic};
}

namespace detail {

// Best rate, in units of 1e9 per second, of `threads` threads each calling
// run(iters) once, where one call does work_per_iter * iters units; iters is
// calibrated on one thread so a call takes about `seconds`. Best of `passes`.
template <class R>
double peak_rate(R (*run)(uint64_t), double work_per_iter, unsigned threads, double seconds, int passes) {
  threads = std::max(1u, threads);
  uint64_t iters = 1 << 16;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    sink.fetch_xor(static_cast<uint64_t>(run(iters)));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > seconds / 4 || iters > (uint64_t{1} << 40)) {
      iters = static_cast<uint64_t>(iters * (seconds / std::max(s, 1e-6)));
      break;
    }
    iters *= 4;
  }
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const double s = timed_parallel(
        threads, [&](unsigned) { sink.fetch_xor(static_cast<uint64_t>(run(iters)), std::memory_order_relaxed); });
    best = std::max(best, work_per_iter * double(iters) * threads / s * 1e-9);
  }
  return best;
}

}  // namespace detail

// Peak fp32 rate in 1e9 flops a second (2 per FMA) with `threads` threads,
// each running its own chains for about `seconds`; best of `passes`.
inline double fma_peak_gflops(unsigned threads, double seconds = 0.2, int passes = 3) {
  const FmaPath path = best_fma_path();
  return detail::peak_rate(path.run, 2.0 * path.lanes * 12, threads, seconds, passes);
}

namespace detail {

// int8 dot-product chains, as the quantized kernels compute them: u8 x s8 byte
// products summed into s32 lanes. A chain step of P products is 2P ops. Each
// step is one asm statement on its accumulator: written with intrinsics, GCC
// copies the accumulators between registers (or to the stack) every step.
#ifdef MMGPT_LIMITS_X86
// VPDPBUSD zmm: 64 byte products per instruction, accumulated in place.
#define MMGPT_I8_STEP(a) asm("vpdpbusd %[y], %[x], %[acc]" : [acc] "+v"(a) : [x] "v"(x), [y] "v"(y))
__attribute__((target("avx512f,avx512vnni"))) inline int32_t int8_chains_vnni512(uint64_t iters) {
  const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
  __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3),
          a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7),
          a8 = _mm512_set1_epi32(8), a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10),
          a11 = _mm512_set1_epi32(11);
  for (uint64_t i = 0; i < iters; ++i) {
    MMGPT_I8_STEP(a0);
    MMGPT_I8_STEP(a1);
    MMGPT_I8_STEP(a2);
    MMGPT_I8_STEP(a3);
    MMGPT_I8_STEP(a4);
    MMGPT_I8_STEP(a5);
    MMGPT_I8_STEP(a6);
    MMGPT_I8_STEP(a7);
    MMGPT_I8_STEP(a8);
    MMGPT_I8_STEP(a9);
    MMGPT_I8_STEP(a10);
    MMGPT_I8_STEP(a11);
  }
  const __m512i s =
      _mm512_xor_si512(_mm512_xor_si512(_mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)),
                                        _mm512_xor_si512(_mm512_xor_si512(a4, a5), _mm512_xor_si512(a6, a7))),
                       _mm512_xor_si512(_mm512_xor_si512(a8, a9), _mm512_xor_si512(a10, a11)));
  alignas(64) int32_t out[16];
  _mm512_store_si512(out, s);
  return out[0] ^ out[15];
}
#undef MMGPT_I8_STEP
// VPMADDUBSW, VPMADDWD by ones, VPADDD (ymm): 32 byte products per three
// instructions, the AVX2 quantized kernels' sequence.
#define MMGPT_I8_STEP(a)                                                                           \
  asm("vpmaddubsw %[y], %[x], %[t]\n\tvpmaddwd %[ones], %[t], %[t]\n\tvpaddd %[t], %[acc], %[acc]" \
      : [acc] "+x"(a), [t] "=&x"(t)                                                                \
      : [x] "x"(x), [y] "x"(y), [ones] "x"(ones))
__attribute__((target("avx2"))) inline int32_t int8_chains_avx2(uint64_t iters) {
  const __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  __m256i t;
  __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2), a3 = _mm256_set1_epi32(3),
          a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5), a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7);
  for (uint64_t i = 0; i < iters; ++i) {
    MMGPT_I8_STEP(a0);
    MMGPT_I8_STEP(a1);
    MMGPT_I8_STEP(a2);
    MMGPT_I8_STEP(a3);
    MMGPT_I8_STEP(a4);
    MMGPT_I8_STEP(a5);
    MMGPT_I8_STEP(a6);
    MMGPT_I8_STEP(a7);
  }
  const __m256i s = _mm256_xor_si256(_mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3)),
                                     _mm256_xor_si256(_mm256_xor_si256(a4, a5), _mm256_xor_si256(a6, a7)));
  return _mm256_extract_epi32(s, 0) ^ _mm256_extract_epi32(s, 7);
}
#undef MMGPT_I8_STEP
#endif

}  // namespace detail

struct Int8DotPath {
  const char* isa;    // the instructions timed
  unsigned products;  // byte products per chain step
  unsigned chains;    // independent chains per loop iteration
  int32_t (*run)(uint64_t);
};

// The int8 dot-product path the quantized kernels use on this CPU (VNNI where
// AVX-512 VNNI is present, else the AVX2 sequence); isa "none" (run null)
// where there is no probe for the CPU.
inline Int8DotPath int8_dot_path() {
#ifdef MMGPT_LIMITS_X86
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni"))
    return {"avx512 vpdpbusd", 64, 12, detail::int8_chains_vnni512};
  if (__builtin_cpu_supports("avx2")) return {"avx2 vpmaddubsw+vpmaddwd+vpaddd", 32, 8, detail::int8_chains_avx2};
#endif
  return {"none", 0, 0, nullptr};
}

// Peak int8 dot-product rate in 1e9 ops a second, 2 per byte product (a
// multiply and an add, as the quantized matmul's flops are counted), with
// `threads` threads; best of `passes`. 0 where int8_dot_path has no probe.
inline double int8_dot_peak_gops(unsigned threads, double seconds = 0.2, int passes = 3) {
  const Int8DotPath path = int8_dot_path();
  if (!path.run) return 0;
  return detail::peak_rate(path.run, 2.0 * path.products * path.chains, threads, seconds, passes);
}

// AMX (Intel Advanced Matrix Extensions) peaks: TDPBF16PS and TDPBSSD on
// tiles held in the tile registers, no loads in the loop (the tile kernels'
// compute ceiling, as the FMA and int8 probes are the vector kernels').
// Detected here on its own (CPUID, XCR0, Linux's permission), so the probes
// do not depend on the kernels' dispatch; 0 where the CPU, the OS or this
// build cannot run them. x86-64 only: the tile instructions exist nowhere else.
// (The target attribute "amx-*" needs GCC 11 or Clang 12.)
#if defined(MMGPT_LIMITS_X86) && defined(__x86_64__) && \
    (defined(__clang__) ? __clang_major__ >= 12 : (defined(__GNUC__) && __GNUC__ >= 11))
#define MMGPT_LIMITS_AMX 1
#endif

struct AmxSupport {
  bool tile = false, int8 = false, bf16 = false;  // CPUID leaf 7 EDX bits 24, 25, 22
  bool os_state = false;                          // XCR0 bits 17 and 18: the OS saves the tile state
  bool permitted = false;                         // Linux granted this process the tile data state
  bool int8_usable() const { return tile && int8 && os_state && permitted; }
  bool bf16_usable() const { return tile && bf16 && os_state && permitted; }
};

namespace detail {

#ifdef MMGPT_LIMITS_AMX
// Linux grants the tile data state per process, for all its threads, on
// request (core/platform.hpp); a tile instruction before that raises SIGILL.
// Asked once (later calls return the first answer).
inline bool amx_permission() {
  static const bool granted = platform::x86_request_amx_tiles();
  return granted;
}

inline AmxSupport detect_amx() {
  AmxSupport s;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return s;
  s.tile = (edx & (1u << 24)) != 0, s.int8 = (edx & (1u << 25)) != 0, s.bf16 = (edx & (1u << 22)) != 0;
  if (!s.tile) return s;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) return s;  // no OSXSAVE: no XGETBV
  unsigned lo = 0, hi = 0;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  s.os_state = (lo & ((1u << 17) | (1u << 18))) == ((1u << 17) | (1u << 18));
  if (s.os_state && (s.int8 || s.bf16)) s.permitted = amx_permission();
  return s;
}

// LDTILECFG's 64-byte operand, palette 1: byte 0 the palette, bytes 16..31
// the bytes per row of tiles 0..7 (uint16 each), bytes 48..55 their rows;
// every other byte zero.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved0[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64);

// Each call configures the tiles on its own thread (the configuration is per
// thread), runs `iters` iterations of four independent tile products (C tiles
// 0..3 from A tiles 4, 5 and B tiles 6, 7: with TDPB*'s latency of a few
// times its issue interval, four accumulators keep the tile unit busy), and
// releases the tiles. Every tile is 16 rows of 64 bytes: A 16 x 32 bf16 or
// 16 x 64 int8, B 16 row pairs/quads x 16 columns, C 16 x 16 f32 or int32.
// One asm statement per operation: GCC's _tile_* intrinsics want literal tile
// numbers, and GCC 12's _tile_loadconfig declares only 8 bytes of its operand.
template <bool Int8>  // TDPBSSD, else TDPBF16PS
__attribute__((target("amx-tile,amx-int8,amx-bf16"))) inline int32_t amx_tiles(uint64_t iters) {
  if (!amx_permission()) return 0;  // each thread's first tile instruction needs the process's grant
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  // A and B: bf16 0x3c00 (1/128), so the f32 sums stay finite and normal over
  // any run; int8 3 and 1.
  alignas(64) uint16_t src[16 * 32];
  alignas(64) int32_t out[16 * 16];
  for (uint16_t& x : src) x = Int8 ? 0x0103 : 0x3c00;
  const uint64_t stride = 64;
  asm volatile("ldtilecfg %0" : : "m"(cfg));
  asm volatile(
      "tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
      "tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5\n\t"
      "tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7"
      :
      : "r"(src), "r"(stride)
      : "memory");
  for (uint64_t i = 0; i < iters; ++i) {
    if constexpr (Int8)
      asm volatile(
          "tdpbssd %%tmm6, %%tmm4, %%tmm0\n\ttdpbssd %%tmm7, %%tmm4, %%tmm1\n\t"
          "tdpbssd %%tmm6, %%tmm5, %%tmm2\n\ttdpbssd %%tmm7, %%tmm5, %%tmm3" ::);
    else
      asm volatile(
          "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
          "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::);
  }
  asm volatile("tilestored %%tmm0, (%0,%1,1)\n\ttilerelease" : : "r"(out), "r"(stride) : "memory");
  return out[0] ^ out[255];
}
#endif

}  // namespace detail

// What this CPU and OS offer of AMX (detected once; asks Linux for the tile
// state the first time, as the kernels do). All false off x86-64.
inline const AmxSupport& amx_support() {
#ifdef MMGPT_LIMITS_AMX
  static const AmxSupport s = detail::detect_amx();
#else
  static const AmxSupport s;
#endif
  return s;
}

// Tile products per loop iteration of the AMX probes, and work per product:
// TDPBF16PS 2 * 16 * 16 * 32 flops (16 x 16 outputs, 32 bf16 products each),
// TDPBSSD 2 * 16 * 16 * 64 ops (64 byte products each).
inline constexpr double kAmxProductsPerIter = 4;
inline constexpr double kAmxBf16FlopsPerProduct = 2.0 * 16 * 16 * 32;
inline constexpr double kAmxInt8OpsPerProduct = 2.0 * 16 * 16 * 64;

// Peak TDPBF16PS rate in 1e9 flops a second with `threads` threads; best of
// `passes`. 0 where AMX-BF16 is not usable here.
inline double amx_bf16_peak_gflops(unsigned threads, double seconds = 0.2, int passes = 3) {
#ifdef MMGPT_LIMITS_AMX
  if (amx_support().bf16_usable())
    return detail::peak_rate(detail::amx_tiles<false>, kAmxProductsPerIter * kAmxBf16FlopsPerProduct, threads, seconds,
                             passes);
#endif
  (void)threads, (void)seconds, (void)passes;
  return 0;
}

// Peak TDPBSSD rate in 1e9 ops a second (2 per byte product, as
// int8_dot_peak_gops counts) with `threads` threads; best of `passes`. 0
// where AMX-INT8 is not usable here.
inline double amx_int8_peak_gops(unsigned threads, double seconds = 0.2, int passes = 3) {
#ifdef MMGPT_LIMITS_AMX
  if (amx_support().int8_usable())
    return detail::peak_rate(detail::amx_tiles<true>, kAmxProductsPerIter * kAmxInt8OpsPerProduct, threads, seconds,
                             passes);
#endif
  (void)threads, (void)seconds, (void)passes;
  return 0;
}

// Buffer size for probes: MMGPT_BENCH_BW_MIB (default 1024 MiB), far past any LLC.
inline size_t probe_bytes(size_t default_mib = 1024) {
  size_t mib = default_mib;
  if (const char* e = std::getenv("MMGPT_BENCH_BW_MIB")) {
    const long v = std::strtol(e, nullptr, 10);
    if (v >= 16 && v <= (1 << 20)) mib = static_cast<size_t>(v);
  }
  return mib << 20;
}

}  // namespace mmgpt::limits
