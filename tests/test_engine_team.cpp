// The decode team (engine/stage_team.hpp): the order each member visits a
// stage's parts, every part run once with the stages in order whatever the
// threads, and a decode step run by a team equal bit for bit to the op-by-op
// run for every weight and KV cache type.
#include <doctest/doctest.h>

#include <tbb/global_control.h>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "decode_prefetch_guard.hpp"
#include "engine/executor.hpp"
#include "engine/stage_team.hpp"
#include "engine_test_model.hpp"
#include "formats/mmgpt_file_rules.hpp"
#include "kernels/kernels.hpp"

using namespace mmgpt;

namespace {

// The CPU vendor's hint, fixed for a test: a waiting member prefetches, and
// asks next_reads, only under a hint that prefetches (the tuner may have
// moved an auto setting to none).
std::string_view vendor_hint() {
  return kernels::decode_prefetch_name(kernels::decode_prefetch_for_vendor(kernels::cpu_vendor()));
}

}  // namespace

TEST_CASE("stage_part_order: each member visits every part once, its own block first and in order") {
  for (size_t members = 1; members <= 5; ++members)
    for (size_t parts = 1; parts <= 23; ++parts)
      for (size_t m = 0; m < members; ++m) {
        CAPTURE(members);
        CAPTURE(parts);
        CAPTURE(m);
        const size_t begin = m * parts / members, end = (m + 1) * parts / members;
        std::set<size_t> seen;
        for (size_t k = 0; k < parts; ++k) {
          const size_t p = stage_part_order(parts, members, m, k);
          REQUIRE(p < parts);
          seen.insert(p);
          if (k < end - begin) CHECK(p == begin + k);  // own block, forward
        }
        CHECK(seen.size() == parts);
        // After its own block a member helps from the far end of the next block.
        if (members > 1 && end - begin < parts) {
          const size_t next = (m + 1) % members;
          const size_t next_end = (next + 1) * parts / members, next_begin = next * parts / members;
          if (next_end > next_begin) CHECK(stage_part_order(parts, members, m, end - begin) == next_end - 1);
        }
      }
}

TEST_CASE("run_stages: every part once, each stage after all of the previous one, for any team and thread count") {
  // Stages of 0 parts (folded into the next by the caller) are skipped.
  const std::vector<uint32_t> parts = {1, 7, 1, 0, 1, 16, 3, 1, 0, 0, 2, 9, 1, 64, 0, 1};
  for (int threads : {1, 2, 4}) {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, threads);
    for (size_t members : {1, 2, 3, 4, 8}) {
      CAPTURE(threads);
      CAPTURE(members);
      for (int round = 0; round < 20; ++round) {
        std::vector<std::unique_ptr<std::atomic<int>[]>> runs;
        for (uint32_t n : parts) runs.emplace_back(new std::atomic<int>[n]());
        std::vector<std::atomic<int>> finished(parts.size());
        std::atomic<int> early{0}, bad_member{0}, skipped_ran{0};
        run_stages(parts, members, [&](size_t stage, size_t part, size_t member) {
          if (parts[stage] == 0) return void(skipped_ran.fetch_add(1));
          if (member >= members) bad_member.fetch_add(1);
          // Every part of every earlier stage has returned before this one starts.
          for (size_t i = 0; i < stage; ++i)
            if (finished[i].load() != static_cast<int>(parts[i])) early.fetch_add(1);
          runs[stage][part].fetch_add(1);
          finished[stage].fetch_add(1);
        });
        CHECK(early.load() == 0);
        CHECK(bad_member.load() == 0);
        CHECK(skipped_ran.load() == 0);
        for (size_t i = 0; i < parts.size(); ++i)
          for (size_t p = 0; p < parts[i]; ++p) REQUIRE(runs[i][p].load() == 1);
      }
    }
  }
}

TEST_CASE("run_stages: a waiting member is asked for the next stage it runs, and prefetching changes nothing") {
  // next_reads(j, m, run) comes only for a stage j with parts, after the
  // first such stage (a member waits only at a stage's end), and only for
  // members of the team; the spans it returns are read by nothing but
  // prefetches, so every part still runs once with the stages in order.
  // (Whether a member waits at all depends on the threads' timing.)
  kt::DecodePrefetchGuard hint(vendor_hint());
  const std::vector<uint32_t> parts = {0, 3, 0, 0, 5, 1, 0, 8, 2};
  const std::vector<std::byte> bytes(100000);
  for (int threads : {1, 2, 4}) {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, threads);
    for (size_t members : {1, 2, 3}) {
      CAPTURE(threads);
      CAPTURE(members);
      for (int round = 0; round < 50; ++round) {
        std::vector<std::atomic<int>> runs(parts.size() * 8);
        std::vector<std::atomic<int>> finished(parts.size());
        std::atomic<int> early{0}, bad_stage{0}, bad_member{0};
        const StageReads next_reads = [&](size_t j, size_t m, size_t run) -> std::span<const std::byte> {
          if (j >= parts.size() || parts[j] == 0 || j <= 1) bad_stage.fetch_add(1);
          if (m >= members) bad_member.fetch_add(1);
          if (run > 2) return {};
          return {bytes.data() + 64 * j + run, bytes.size() - 64 * j - run};
        };
        run_stages(
            parts, members,
            [&](size_t stage, size_t part, size_t) {
              for (size_t i = 0; i < stage; ++i)
                if (finished[i].load() != static_cast<int>(parts[i])) early.fetch_add(1);
              runs[stage * 8 + part].fetch_add(1);
              finished[stage].fetch_add(1);
            },
            next_reads);
        CHECK(early.load() == 0);
        CHECK(bad_stage.load() == 0);
        CHECK(bad_member.load() == 0);
        for (size_t i = 0; i < parts.size(); ++i)
          for (size_t p = 0; p < parts[i]; ++p) REQUIRE(runs[i * 8 + p].load() == 1);
      }
    }
  }
}

namespace {

// Stages of 2 and 1 parts on two members, member 0 holding its part of
// stage 0 until released() (at most 5 s), then `extra` longer; member 1
// holding its part until member 0 has started (at most 5 s), so that it
// finds part 0 taken and waits. Returns whether the two split stage 0 so
// that member 1 waited for member 0 (member 0 ran part 0 and member 1 part
// 1); where they did not (no second thread within 5 s), the caller has
// nothing to check.
bool run_with_member0_held(const StageReads& next_reads, const std::function<bool()>& released,
                           std::chrono::milliseconds extra = std::chrono::milliseconds(0)) {
  tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
  const std::vector<uint32_t> parts = {2, 1};
  // Both, not only member 1 running part 1: member 1 alone (member 0 not
  // started within 5 s) claims part 0 too, and then nobody waits.
  std::atomic<bool> member1_ran_part1{false}, member0_ran_part0{false};
  run_stages(
      parts, 2,
      [&](size_t stage, size_t part, size_t member) {
        if (stage != 0) return;
        if (member == 1 && part == 1) {
          // Let member 0 claim part 0 first (at most 5 s), so the two split
          // the stage whenever they run at the same time.
          member1_ran_part1 = true;
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          while (!member0_ran_part0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        }
        if (member == 0 && part == 0) {
          member0_ran_part0 = true;
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          while (!released() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
          std::this_thread::sleep_for(extra);
        }
      },
      next_reads);
  return member0_ran_part0.load() && member1_ran_part1.load();
}

}  // namespace

TEST_CASE("run_stages: a member that waits is asked what it reads next") {
  // Member 0's part holds on until member 1 (done with its part, so waiting
  // for member 0's) has asked next_reads for stage 1.
  kt::DecodePrefetchGuard hint(vendor_hint());
  int splits = 0;
  for (int round = 0; round < 5; ++round) {
    std::atomic<bool> asked{false};
    std::atomic<int> bad_args{0};
    const StageReads next_reads = [&](size_t j, size_t m, size_t run) -> std::span<const std::byte> {
      // Member 0 may wait too (for part 1, where member 1 claimed it and
      // has not finished it yet), so either member may ask.
      if (j != 1 || m > 1 || run != 0) bad_args.fetch_add(1);
      if (m == 1) asked = true;
      return {};
    };
    const bool split = run_with_member0_held(next_reads, [&] { return asked.load(); });
    CHECK(bad_args.load() == 0);
    if (split) CHECK(asked.load());  // member 1 finished part 1 while member 0 held part 0, so it waited
    splits += split;
  }
  MESSAGE(splits << " of 5 rounds split the stage (the rest had nothing to check)");
}

TEST_CASE("run_stages: a waiting member asks for the runs it reads in order, up to the cap") {
  // As above, member 1 waits for member 0's part of stage 0. It asks for
  // run 0, 1, 2, ... of stage 1, each once, and stops at the first empty run
  // (case 1: run 2 is empty) or once kStagePrefetchCap bytes are requested
  // (case 2: runs of 0.6 cap each, so never run 2). Member 0 holds its part
  // until member 1 has asked for run 1, and 50 ms more, time enough to
  // request a megabyte of prefetches many times over. Member 0 may wait too
  // (for part 1, claimed by member 1 and not yet finished: a descheduled
  // thread), so each member's asks are counted apart, and the same rules
  // hold for both.
  kt::DecodePrefetchGuard hint(vendor_hint());
  const std::vector<std::byte> bytes(2 * kStagePrefetchCap);
  int splits = 0;
  for (const size_t run_bytes : {size_t{4096}, kStagePrefetchCap * 6 / 10}) {
    CAPTURE(run_bytes);
    for (int round = 0; round < 3; ++round) {
      std::vector<std::atomic<int>> asked(2 * 8);  // asked[8 m + run]
      std::atomic<int> bad_args{0};
      const StageReads next_reads = [&](size_t j, size_t m, size_t run) -> std::span<const std::byte> {
        if (j != 1 || m > 1 || run >= 8) return bad_args.fetch_add(1), std::span<const std::byte>();
        for (size_t r = 0; r < run; ++r)
          if (asked[8 * m + r].load() != 1) bad_args.fetch_add(1);  // runs asked out of order
        asked[8 * m + run].fetch_add(1);
        if (run_bytes == 4096 && run == 2) return {};
        return {bytes.data() + run * run_bytes, run_bytes};
      };
      const bool split = run_with_member0_held(
          next_reads, [&] { return asked[8 + 1].load() != 0; }, std::chrono::milliseconds(50));
      CHECK(bad_args.load() == 0);
      for (size_t m = 0; m < 2; ++m) {
        CAPTURE(m);
        for (size_t r = 0; r < 8; ++r) CHECK(asked[8 * m + r].load() <= 1);
        CHECK(asked[8 * m + 3].load() == 0);
        if (run_bytes != 4096) CHECK(asked[8 * m + 2].load() == 0);  // 1.2 cap requested after run 1: the cap
      }
      if (split) {
        CHECK(asked[8 + 0].load() == 1);
        CHECK(asked[8 + 1].load() == 1);
        if (run_bytes == 4096) CHECK(asked[8 + 2].load() == 1);  // the empty run that ends them
      }
      splits += split;
    }
  }
  MESSAGE(splits << " of 6 rounds split the stage (the rest had nothing to check)");
}

TEST_CASE("run_stages: with the prefetch hint none, a waiting member asks for nothing") {
  // The same held run, member 0 released after 20 ms: member 1 waits for it
  // (when the two split the stage) without asking next_reads.
  kt::DecodePrefetchGuard hint("none");
  int splits = 0;
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> asked{0};
    const StageReads next_reads = [&](size_t, size_t, size_t) -> std::span<const std::byte> {
      asked.fetch_add(1);
      return {};
    };
    const auto start = std::chrono::steady_clock::now();
    splits += run_with_member0_held(
        next_reads, [&] { return std::chrono::steady_clock::now() - start > std::chrono::milliseconds(20); });
    CHECK(asked.load() == 0);
  }
  MESSAGE(splits << " of 3 rounds split the stage");
}

namespace {

std::string name(WeightType d) { return std::string(mmgpt::weight_type_name(d)); }

// Logits of prefilling ids[0, 3) and then decoding the rest one at a time,
// each step's row appended; `members` as Executor::set_decode_team.
std::vector<float> decode_logits(std::shared_ptr<const Model> model, const std::vector<int32_t>& ids, size_t members,
                                 WeightType kv = WeightType::F32) {
  Executor ex(std::move(model));
  ex.set_decode_team(members);
  KVCache cache(ex.model().config(), kv);
  auto l = ex.run(std::span(ids).first(3), cache, 1);
  std::vector<float> all(l.begin(), l.end());
  for (size_t t = 3; t < ids.size(); ++t) {
    l = ex.run(std::span(ids).subspan(t, 1), cache, 1);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

}  // namespace

TEST_CASE("a decode step run by a team equals the op-by-op run bit for bit, for every weight and cache type") {
  // Wide enough that matmul_packed's rule splits the matmuls, unevenly
  // (n_embd 272, 17 panels: qkv 51 panels in ranges of 16, fc 68 in 16s,
  // its projection 17 in 4s), vocab 101 (7 panels) in one range, and more
  // members than parts. Heads of 68 are not whole q8 blocks, so there only
  // the MLP projection's x comes quantized by its producers (the fc parts);
  // with heads of 64 (n_embd 256, q8_0 / q4_0) the attention output's does too.
  const std::pair<size_t, WeightType> cases[] = {
      {272, WeightType::F32},  {272, WeightType::BF16}, {272, WeightType::F16}, {272, WeightType::Q8_0},
      {272, WeightType::Q4_0}, {256, WeightType::Q8_0}, {256, WeightType::Q4_0}};
  for (const auto& shape_and_type : cases) {
    // Plain variables, not structured bindings: doctest's CAPTURE is a lambda,
    // and Debian 12's clang 14 (the sanitizer builds) cannot capture a binding.
    const size_t n_embd = shape_and_type.first;
    const WeightType dt = shape_and_type.second;
    CAPTURE(n_embd);
    CAPTURE(name(dt));
    ModelConfig cfg = test::small_config(2, 4, n_embd, 20, 101);
    cfg.tied_lm_head = dt == WeightType::F16 || dt == WeightType::Q4_0;
    const std::string path = test::temp_path("engine_team.mmgpt");
    test::write_random_model(path, cfg, 12, "", 0.2f, -1, Layout::Panel16, dt);
    auto model = Model::load(path);
    const auto ids = test::random_ids(cfg.n_ctx, cfg.vocab_size, 6);
    REQUIRE(kernels::panel_range_grain(1, cfg.n_embd, 3 * cfg.n_embd, 2) <
            mmgpt::panel_count(3 * cfg.n_embd));  // the team really splits matmuls
    for (WeightType kv : {WeightType::F32, WeightType::F16}) {
      CAPTURE(name(kv));
      std::vector<float> plain;
      {
        tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
        plain = decode_logits(model, ids, 1, kv);
      }
      for (int threads : {1, 2, 3}) {
        tbb::global_control c(tbb::global_control::max_allowed_parallelism, threads);
        // 0: one member per thread (with 1 thread: no team); more members
        // than threads: the threads that do run take every part.
        for (size_t members : {0, 2, 3, 7}) {
          CAPTURE(threads);
          CAPTURE(members);
          const auto team = decode_logits(model, ids, members, kv);
          REQUIRE(team.size() == plain.size());
          CHECK(std::memcmp(team.data(), plain.data(), plain.size() * sizeof(float)) == 0);
        }
        // Under each fixed prefetch hint (a waiting member prefetches with
        // it, or not at all with none): the same bits.
        for (kernels::DecodePrefetch h :
             {kernels::DecodePrefetch::Nta, kernels::DecodePrefetch::T0, kernels::DecodePrefetch::None}) {
          CAPTURE(threads);
          CAPTURE(std::string(kernels::decode_prefetch_name(h)));
          kt::DecodePrefetchGuard hint(kernels::decode_prefetch_name(h));
          const auto team = decode_logits(model, ids, 0, kv);
          CHECK(std::memcmp(team.data(), plain.data(), plain.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}
