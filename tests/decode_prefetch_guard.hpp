#pragma once
// Restores the decode prefetch setting (auto, or a fixed hint) when a test
// that changes it ends, whether it ends normally or by a failed REQUIRE.
// Shared by the kernel tests (kernels_testing.hpp) and the engine's.
#include <string>
#include <string_view>

#include <doctest/doctest.h>

#include "kernels/decode_prefetch_kind.hpp"

namespace kt {

struct DecodePrefetchGuard {
  std::string saved{mmgpt::kernels::decode_prefetch_setting()};
  DecodePrefetchGuard() = default;
  // Also sets `setting` ("nta", "t0", "none" or "auto") until the guard ends.
  explicit DecodePrefetchGuard(std::string_view setting) { REQUIRE(mmgpt::kernels::force_decode_prefetch(setting)); }
  DecodePrefetchGuard(const DecodePrefetchGuard&) = delete;
  DecodePrefetchGuard& operator=(const DecodePrefetchGuard&) = delete;
  ~DecodePrefetchGuard() { mmgpt::kernels::force_decode_prefetch(saved); }
};

}  // namespace kt
