#pragma once
// The check every hostile-input test makes (test_formats_bounds,
// test_convert_bounds): the input is refused with a one-line mmgpt::Error
// naming what is wrong, and what the parser allocated on the way stayed
// within `limit` (counted by the operator new of tests/alloc_counter.hpp,
// which the test executable includes first).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "alloc_counter.hpp"
#include "formats/error.hpp"

namespace bounds_testing {

constexpr uint64_t MiB = uint64_t(1) << 20;

// Runs `f`, expects an mmgpt::Error whose message holds every part, and checks
// that neither a single request nor the peak of live bytes passed `limit`.
inline void refused_within(uint64_t limit, const std::function<void()>& f, const std::vector<std::string>& parts) {
  std::string msg;
  uint64_t peak = 0, largest = 0;
  {
    alloc_counter::Scope scope;
    try {
      f();
    } catch (const mmgpt::Error& e) {
      msg = e.what();
    }
    peak = scope.peak_bytes();
    largest = scope.largest_bytes();
  }
  INFO("message: " << msg);
  INFO("peak " << peak << " bytes, largest request " << largest << " bytes, limit " << limit);
  REQUIRE_MESSAGE(!msg.empty(), "no mmgpt::Error thrown");
  for (const auto& p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, "the message lacks '" << p << "'");
  CHECK(msg.find('\n') == std::string::npos);
  CHECK(largest <= limit);
  CHECK(peak <= limit);
}

}  // namespace bounds_testing
