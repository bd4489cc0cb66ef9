// MMGPT_ISA and MMGPT_DECODE_PREFETCH are each read once, at the first use
// of what they choose in the process. This executable holds only these tests
// so that those first uses are the ones below.
#include <cstdlib>
#include <vector>

#include "kernels_testing.hpp"

namespace k = mmgpt::kernels;

TEST_CASE("MMGPT_ISA=scalar forces the scalar reference") {
  REQUIRE(setenv("MMGPT_ISA", "scalar", 1) == 0);
  CHECK(k::isa_name() == "scalar");
  // The choice is made once: later changes to the environment do not move it.
  REQUIRE(setenv("MMGPT_ISA", "avx2", 1) == 0);
  std::vector<float> x = {1.0f, 2.0f};
  k::softmax(x.data(), x.size());
  CHECK(k::isa_name() == "scalar");
}

TEST_CASE("MMGPT_DECODE_PREFETCH fixes the decode prefetch hint, read once") {
  // The hint this CPU would start from, and the other one, which the variable fixes.
  const bool t0_by_cpu = k::decode_prefetch_for_vendor(k::cpu_vendor()) == k::DecodePrefetch::T0;
  const char* other = t0_by_cpu ? "nta" : "t0";
  REQUIRE(setenv("MMGPT_DECODE_PREFETCH", other, 1) == 0);
  CHECK(k::decode_prefetch_name() == other);
  CHECK(k::decode_prefetch_setting() == other);
  REQUIRE(setenv("MMGPT_DECODE_PREFETCH", "auto", 1) == 0);
  CHECK(k::decode_prefetch_name() == other);  // read once
  CHECK(k::decode_prefetch_setting() == other);
}
