// MMGPT_ISA is read once, at the first use of a kernel in the process. This
// executable holds only this test so that its first use is the one below.
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
