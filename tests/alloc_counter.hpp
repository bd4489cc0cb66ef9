#pragma once
// Replaces the global operator new/delete of the test executable that
// includes this header (include it in exactly one file of that executable) so
// that a test can measure what a parser allocates: the largest single request
// and the peak of live bytes while a scope is open. A limit on the address
// space (RLIMIT_AS) would be the other way, but it misfires under sanitizers,
// which reserve terabytes of shadow memory.
//
// Each block carries its size in a header in front of it, so deletes (sized
// or not) can subtract exactly what was added.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace alloc_counter {

inline std::atomic<uint64_t> live{0};     // bytes allocated now
inline std::atomic<uint64_t> peak{0};     // highest `live` since reset()
inline std::atomic<uint64_t> largest{0};  // largest single request since reset()

// Starts a measurement: peak counts from the bytes live now.
inline void reset() {
  peak = live.load();
  largest = 0;
}

struct Scope {  // peak and largest of what happens inside, relative to its start
  uint64_t base = live.load();
  Scope() { reset(); }
  uint64_t peak_bytes() const { return peak.load() > base ? peak.load() - base : 0; }
  uint64_t largest_bytes() const { return largest.load(); }
};

inline void note_alloc(uint64_t n) {
  const uint64_t now = live.fetch_add(n) + n;
  for (uint64_t p = peak.load(); now > p && !peak.compare_exchange_weak(p, now);) {
  }
}

// The header keeps the block's size and is as large as the alignment, so the
// user pointer keeps the alignment asked for.
inline void* allocate(std::size_t n, std::size_t align, bool nothrow) {
  const std::size_t head = align < 16 ? 16 : align;
  // A request counts as made even when it fails: a parser that asks for 2^40
  // bytes is wrong whether or not the machine could have given them.
  for (uint64_t l = largest.load(); n > l && !largest.compare_exchange_weak(l, n);) {
  }
  void* base = nullptr;
  if (n <= SIZE_MAX - head && posix_memalign(&base, head, head + n) == 0) {
    note_alloc(n);
    char* user = static_cast<char*>(base) + head;
    reinterpret_cast<std::size_t*>(user)[-1] = n;
    reinterpret_cast<std::size_t*>(user)[-2] = head;
    return user;
  }
  if (nothrow) return nullptr;
  throw std::bad_alloc();
}

inline void release(void* p) {
  if (!p) return;
  char* user = static_cast<char*>(p);
  const std::size_t n = reinterpret_cast<std::size_t*>(user)[-1];
  const std::size_t head = reinterpret_cast<std::size_t*>(user)[-2];
  live.fetch_sub(n);
  std::free(user - head);
}

}  // namespace alloc_counter

void* operator new(std::size_t n) { return alloc_counter::allocate(n, 16, false); }
void* operator new[](std::size_t n) { return alloc_counter::allocate(n, 16, false); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return alloc_counter::allocate(n, 16, true); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return alloc_counter::allocate(n, 16, true); }
void* operator new(std::size_t n, std::align_val_t a) { return alloc_counter::allocate(n, std::size_t(a), false); }
void* operator new[](std::size_t n, std::align_val_t a) { return alloc_counter::allocate(n, std::size_t(a), false); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return alloc_counter::allocate(n, std::size_t(a), true);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return alloc_counter::allocate(n, std::size_t(a), true);
}
void operator delete(void* p) noexcept { alloc_counter::release(p); }
void operator delete[](void* p) noexcept { alloc_counter::release(p); }
void operator delete(void* p, std::size_t) noexcept { alloc_counter::release(p); }
void operator delete[](void* p, std::size_t) noexcept { alloc_counter::release(p); }
void operator delete(void* p, std::align_val_t) noexcept { alloc_counter::release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { alloc_counter::release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { alloc_counter::release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { alloc_counter::release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { alloc_counter::release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { alloc_counter::release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { alloc_counter::release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { alloc_counter::release(p); }
