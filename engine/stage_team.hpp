#pragma once
// A step run as a sequence of stages shared by a team of threads, without a
// fork and a join per stage.
//
// A decode step is a long sequence of short operations. Forking each
// matmul's panels over TBB and joining them makes every join wait for the
// slower thread (docs/kernels.md, "The decode team"). Here the members
// start once per step and walk the stages in order together: each stage is
// split into parts, any member may claim any part, and a member goes on to
// the next stage once every part of this one has finished (it spins: the
// wait is usually short).
//
// No member ever waits for a member that has not started: a part is claimed
// only by the member that runs it at once, so one thread alone runs the
// whole step, and a member that starts late finds the stages done. Which
// member runs a part never changes what the part computes, so results do
// not depend on the team.
//
// Member m first takes the parts of its own block of each stage (parts
// [m P / n, (m+1) P / n), in order, so its reads run on from one part into
// the next), then helps with the others' blocks from their ends.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>

namespace mmgpt {

// Runs the stages of `parts` (parts[i]: the parts of stage i) on up to
// `members` threads, calling work(stage, part, member) exactly once for
// every part of every stage; every part of a stage has returned before any
// part of a later stage starts. A stage of 0 parts is skipped, with no wait:
// an operation the caller folds into the next stage (the decode team's layer
// norms, which each member computes for itself before its matmul parts).
// `member` is the caller's index for what it keeps per member
// (0 .. members-1; a member runs on one thread throughout).
// The members are TBB tasks (mmgpt::parallel_for), so --threads and the
// task arena bound them; work must not throw.
//
// A member that has to wait for the others at a stage's end meanwhile
// prefetches what it reads first in the next stage it runs: next_reads(j, m,
// k) gives the k-th run of those bytes for stage j and member m, in the
// order the member reads them (k = 0, 1, ...; an empty span ends them),
// requested with the decode kernels' prefetch hint (non-temporal or T0,
// kernels/decode_prefetch.hpp; with none it asks for nothing and only
// waits) a few lines between looks at the stage's count,
// until the stage is done, the runs are, or kStagePrefetchCap bytes have
// been requested. The wait turns into reads the member would make anyway,
// and it starts the next stage with them arriving (docs/kernels.md, "The
// decode team"). Unset, or an empty first run: a plain wait.
using StageReads = std::function<std::span<const std::byte>(size_t stage, size_t member, size_t run)>;
// About what a core's L2 holds: more would push out the first lines before
// the stage reads them.
constexpr size_t kStagePrefetchCap = size_t{1} << 20;
void run_stages(std::span<const uint32_t> parts, size_t members,
                const std::function<void(size_t stage, size_t part, size_t member)>& work,
                const StageReads& next_reads = nullptr);

// Member m's own block of a stage of `parts` parts: parts [first, second).
std::pair<size_t, size_t> stage_own_block(size_t parts, size_t members, size_t m);

// The part of member m's visiting order at position k (0 <= k < parts): its
// own block forward, then each other block (m+1, m+2, ... modulo members)
// from its end. Exposed for the tests.
size_t stage_part_order(size_t parts, size_t members, size_t m, size_t k);

}  // namespace mmgpt
