// Engine tests that need no PyTorch: KV-cache consistency, buffer planning,
// thread-count independence, sliding-window generation. Parity with PyTorch
// lives in tests/reference.
#include <doctest/doctest.h>

#include <tbb/global_control.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/attention.hpp"
#include "engine/even_split.hpp"
#include "engine/executor.hpp"
#include "engine/huge_page_buffer.hpp"
#include "engine/mmgpt.hpp"
#include "engine/rope.hpp"
#include "engine_test_model.hpp"
#include "formats/error.hpp"

using namespace mmgpt;
using test::all_logits;
using test::random_ids;

namespace {

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace

// Both weight layouts: panel16 (what the converter writes) and row-major
// (older files: packed into panels at load).
const Layout kLayouts[] = {Layout::Panel16, Layout::RowMajor};

TEST_CASE("decoding with the KV cache matches a full prefill, row by row") {
  for (Layout layout : kLayouts)
    for (auto cfg : {test::small_config(), test::small_config(1, 1, 8, 9, 5), test::small_config(3, 4, 60, 24, 101)}) {
      for (bool bias : {true, false}) {
        CAPTURE(static_cast<int>(layout));
        cfg.qkv_bias = cfg.linear_bias = cfg.norm_bias = bias;
        cfg.gelu = bias ? GeluKind::Tanh : GeluKind::Erf;
        const std::string path = test::temp_path("engine_cache.mmgpt");
        test::write_random_model(path, cfg, 7 + cfg.n_embd, "", 0.2f, -1, layout);
        Executor ex(Model::load(path));
        const size_t V = cfg.vocab_size;
        auto ids = random_ids(cfg.n_ctx, cfg.vocab_size, 3);
        auto full = all_logits(ex, ids);

        // Prefill a prefix, then one token at a time.
        for (size_t prefix : {size_t{1}, size_t{5}}) {
          KVCache cache(cfg);
          auto l = ex.run(std::span(ids).first(prefix), cache, 1);
          CHECK(max_abs_diff(l, std::span(full).subspan((prefix - 1) * V, V)) < 1e-5f);
          for (size_t t = prefix; t < ids.size(); ++t) {
            l = ex.run(std::span(ids).subspan(t, 1), cache, 1);
            CHECK(max_abs_diff(l, std::span(full).subspan(t * V, V)) < 1e-5f);
          }
          CHECK(cache.length() == cfg.n_ctx);
          CHECK_THROWS_AS(ex.run(std::span(ids).first(1), cache, 1), Error);  // past the context
        }
      }
    }
}

TEST_CASE("a prefix's logits do not depend on what follows (causal mask)") {
  auto cfg = test::small_config();
  const std::string path = test::temp_path("engine_causal.mmgpt");
  test::write_random_model(path, cfg, 11);
  Executor ex(Model::load(path));
  auto a = random_ids(10, cfg.vocab_size, 1);
  auto b = a;
  b[7] = (b[7] + 1) % cfg.vocab_size;
  auto la = all_logits(ex, a), lb = all_logits(ex, b);
  const size_t V = cfg.vocab_size;
  CHECK(max_abs_diff(std::span(la).first(7 * V), std::span(lb).first(7 * V)) == 0.0f);
  CHECK(max_abs_diff(std::span(la).subspan(7 * V), std::span(lb).subspan(7 * V)) > 0.0f);
}

TEST_CASE("results are identical for any thread count") {
  for (Layout layout : kLayouts) {
    CAPTURE(static_cast<int>(layout));
    auto cfg = test::small_config(2, 4, 64, 32, 300);
    const std::string path = test::temp_path("engine_threads.mmgpt");
    test::write_random_model(path, cfg, 5, "", 0.2f, -1, layout);
    auto model = Model::load(path);
    auto ids = random_ids(32, cfg.vocab_size, 9);
    std::vector<float> one, two;
    {
      tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
      Executor ex(model);
      one = all_logits(ex, ids);
    }
    {
      tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
      Executor ex(model);
      two = all_logits(ex, ids);
    }
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("a row-major file (older converters) is packed at load and computes its panel16 twin's bits") {
  for (auto cfg : {test::small_config(2, 3, 30, 16, 37), test::small_config(2, 4, 64, 40, 300)}) {
    for (bool tied : {true, false}) {
      cfg.gelu = cfg.n_embd == 30 ? GeluKind::Erf : GeluKind::Tanh;
      cfg.tied_lm_head = tied;
      const std::string a = test::temp_path("engine_twin_rm.mmgpt"), b = test::temp_path("engine_twin_p16.mmgpt");
      test::write_random_model(a, cfg, 21, "", 0.3f, -1, Layout::RowMajor);
      test::write_random_model(b, cfg, 21, "", 0.3f, -1, Layout::Panel16);
      auto ma = Model::load(a), mb = Model::load(b);
      REQUIRE(ma->notices().size() == 1);
      CHECK(ma->notices()[0].find("row-major") != std::string::npos);
      CHECK(mb->notices().empty());
      CHECK(ma->file().tensor("h.0.mlp.fc.weight").layout == Layout::RowMajor);  // the file is as written
      CHECK(ma->tensor("h.0.mlp.fc.weight").layout == Layout::Panel16);          // what the engine reads
      Executor ra(ma), pb(mb);
      const std::string graph = ra.graph().to_string();
      CHECK(graph == pb.graph().to_string());
      CHECK(graph.find("+gelu") != std::string::npos);           // fused bias + GELU
      CHECK(graph.find("(added into x)") != std::string::npos);  // fused residual adds
      auto ids = random_ids(cfg.n_ctx, cfg.vocab_size, 4);
      auto la = all_logits(ra, ids), lb = all_logits(pb, ids);
      CHECK(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("token ids outside the vocabulary are refused") {
  auto cfg = test::small_config();
  const std::string path = test::temp_path("engine_ids.mmgpt");
  test::write_random_model(path, cfg, 2);
  Executor ex(Model::load(path));
  KVCache cache(cfg);
  std::vector<int32_t> bad = {1, static_cast<int32_t>(cfg.vocab_size)};
  CHECK_THROWS_WITH_AS(ex.run(bad, cache, 1), doctest::Contains("outside the vocabulary"), Error);
  std::vector<int32_t> negative = {-1};
  CHECK_THROWS_AS(ex.run(negative, cache, 1), Error);
  CHECK(cache.length() == 0);
}

TEST_CASE("planned buffers never overlap while both are alive") {
  auto cfg = test::small_config(3, 2, 16, 16, 50);
  const std::string path = test::temp_path("engine_plan.mmgpt");
  test::write_random_model(path, cfg, 4);
  auto model = Model::load(path);
  Graph g = build_gpt_graph(*model);
  const size_t n = g.buffers.size();
  std::vector<size_t> first(n, SIZE_MAX), last(n, 0);
  for (size_t i = 0; i < g.ops.size(); ++i)
    for (int b : {g.ops[i].input, g.ops[i].output})
      if (b >= 0) first[b] = std::min(first[b], i), last[b] = std::max(last[b], i);
  last[g.logits] = g.ops.size();
  for (auto [T, R] : {std::pair<size_t, size_t>{1, 1}, {7, 1}, {16, 16}, {13, 5}}) {
    BufferPlan p = plan_buffers(g, T, R);
    size_t total = 0;
    for (size_t a = 0; a < n; ++a) {
      total += p.sizes[a];
      CHECK(p.offsets[a] % 64 == 0);
      CHECK(p.offsets[a] + p.sizes[a] <= p.arena_bytes);
      for (size_t b = a + 1; b < n; ++b) {
        const bool alive_together = first[a] <= last[b] && first[b] <= last[a];
        const bool disjoint = p.offsets[a] + p.sizes[a] <= p.offsets[b] || p.offsets[b] + p.sizes[b] <= p.offsets[a];
        if (alive_together) CHECK(disjoint);
      }
    }
    CHECK(p.arena_bytes < total);  // reuse actually happens
  }
  CHECK(g.to_string().find("h.2.mlp.fc") != std::string::npos);
}

TEST_CASE("generation past the context slides the window like nanoGPT") {
  auto cfg = test::small_config(2, 2, 12, 8, 23);
  const std::string path = test::temp_path("engine_slide.mmgpt");
  test::write_random_model(path, cfg, 21, "", 0.5f);
  auto lm = LanguageModel::load(path);
  auto model = lm.shared_model();
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  GenerateOptions opt;
  opt.max_new_tokens = 20;
  opt.sampling.greedy = true;
  auto got = lm.generate(prompt, opt).tokens;
  REQUIRE(got.size() == 20);

  // Reference: a fresh full forward of the last n_ctx tokens for every step.
  std::vector<int32_t> hist = prompt, expected;
  Executor ref(model);
  for (int i = 0; i < 20; ++i) {
    std::vector<int32_t> window(hist.end() - std::min<size_t>(hist.size(), cfg.n_ctx), hist.end());
    KVCache cache(cfg);
    auto l = ref.run(window, cache, 1);
    int32_t t = argmax(l);
    expected.push_back(t);
    hist.push_back(t);
  }
  CHECK(got == expected);
  opt.prefill_chunk = 3;  // the window re-run in chunks too
  CHECK(lm.generate(prompt, opt).tokens == expected);
}

TEST_CASE("generation stops at end-of-text unless told to ignore it, and on request") {
  auto cfg = test::small_config(1, 2, 8, 32, 3);
  const std::string path = test::temp_path("engine_eos.mmgpt");
  // Tokens "a", "b", "c"; the third is the end-of-text token.
  test::write_random_model(path, cfg, 3, "abc", 1.0f);
  auto lm = LanguageModel::load(path);
  std::vector<int32_t> prompt = {0};
  GenerateOptions opt;
  opt.max_new_tokens = 30;
  opt.sampling.greedy = true;
  auto all = lm.generate(prompt, opt);
  REQUIRE(all.tokens.size() == 30);
  CHECK(all.reason == StopReason::Length);
  CHECK(all.text == lm.decode(all.tokens));

  // The same model with its fourth generated token declared end-of-text.
  const int32_t eos = all.tokens[3];
  const std::string eos_path = test::temp_path("engine_eos2.mmgpt");
  test::write_random_model(eos_path, cfg, 3, "abc", 1.0f, eos);
  auto lm_eos = LanguageModel::load(eos_path);
  auto stopped = lm_eos.generate(prompt, opt);
  const auto first_eos = std::find(all.tokens.begin(), all.tokens.end(), eos);
  CHECK(stopped.tokens == std::vector<int32_t>(all.tokens.begin(), first_eos));
  CHECK(stopped.reason == StopReason::EndOfText);
  opt.ignore_eos = true;
  CHECK(lm_eos.generate(prompt, opt).tokens == all.tokens);
  opt.ignore_eos = false;

  int calls = 0;
  auto early = lm.generate(prompt, opt, [&](const TokenEvent&) { return ++calls < 4; });
  CHECK(early.tokens.size() == 4);
  CHECK(early.reason == StopReason::Callback);
  CHECK(early.tokens == std::vector<int32_t>(all.tokens.begin(), all.tokens.begin() + 4));
}

TEST_CASE("a prompt run in chunks gives the same tokens, and interrupt stops between steps") {
  auto cfg = test::small_config(2, 2, 16, 64, 23);
  const std::string path = test::temp_path("engine_chunks.mmgpt");
  test::write_random_model(path, cfg, 31, "", 0.5f);
  auto lm = LanguageModel::load(path);
  std::vector<int32_t> prompt(40), other(9);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7 + 3) % 23);
  for (size_t i = 0; i < other.size(); ++i) other[i] = static_cast<int32_t>((i * 5 + 1) % 23);
  GenerateOptions opt;
  opt.max_new_tokens = 12;
  opt.sampling.temperature = 1.0f;
  opt.sampling.top_k = 0;
  opt.sampling.seed = 5;
  const GenerationResult whole = lm.generate(prompt, opt);
  const GenerationResult whole_other = lm.generate(other, opt);
  REQUIRE(whole.tokens.size() == 12);
  for (size_t chunk : {1, 3, 7, 40, 100}) {
    CAPTURE(chunk);
    opt.prefill_chunk = chunk;
    const GenerationResult r = lm.generate(prompt, opt);
    CHECK(r.tokens == whole.tokens);
    CHECK(r.text == whole.text);
    const auto batch = lm.generate_batch({prompt, other}, opt);
    CHECK(batch[0].tokens == whole.tokens);
    CHECK(batch[1].tokens == whole_other.tokens);
  }

  // Chunks of 7: six steps for the prompt (the sixth samples the first
  // token), then one a token. Interrupted before the third step: no token.
  opt.prefill_chunk = 7;
  int calls = 0;
  opt.interrupt = [&] { return ++calls == 3; };
  GenerationResult cut = lm.generate(prompt, opt);
  CHECK(calls == 3);
  CHECK(cut.tokens.empty());
  CHECK(cut.reason == StopReason::Callback);
  // Before the ninth step: eight steps ran, which made three tokens.
  calls = 0;
  opt.interrupt = [&] { return ++calls == 9; };
  cut = lm.generate(prompt, opt);
  CHECK(cut.tokens == std::vector<int32_t>(whole.tokens.begin(), whole.tokens.begin() + 3));
  CHECK(cut.reason == StopReason::Callback);
  calls = 0;
  const auto batch = lm.generate_batch({prompt, other}, opt);
  for (const GenerationResult& b : batch) CHECK(b.reason == StopReason::Callback);
  CHECK(batch[0].tokens == std::vector<int32_t>(whole.tokens.begin(), whole.tokens.begin() + 3));
}

TEST_CASE("a stop string ends generation, across token boundaries, and is not emitted") {
  auto cfg = test::small_config(1, 2, 8, 64, 4);
  const std::string path = test::temp_path("engine_stop.mmgpt");
  test::write_random_model(path, cfg, 5, "abcd", 1.5f);
  auto lm = LanguageModel::load(path);
  GenerateOptions opt;
  opt.max_new_tokens = 60;
  opt.sampling.temperature = 1.0f;
  opt.sampling.top_k = 0;
  opt.sampling.seed = 11;
  const std::vector<int32_t> prompt = {0, 1};
  auto free_run = lm.generate(prompt, opt);
  REQUIRE(free_run.text.size() == 60);
  // A two-character stop string that first occurs somewhere after the start.
  const std::string stop = free_run.text.substr(20, 2);
  const size_t at = free_run.text.find(stop);
  opt.stop = {"zz", stop};
  std::string streamed;
  auto stopped = lm.generate(prompt, opt, [&](const TokenEvent& e) {
    streamed += e.text;
    return true;
  });
  CHECK(stopped.reason == StopReason::StopString);
  CHECK(stopped.text == free_run.text.substr(0, at));
  CHECK(streamed == stopped.text);
  CHECK(stopped.tokens.size() == at + 2);  // the tokens that completed the stop string are generated, not shown
}

TEST_CASE("a batch gives each prompt exactly what it gets alone") {
  for (Layout layout : kLayouts) {
    CAPTURE(static_cast<int>(layout));
    auto cfg = test::small_config(2, 3, 24, 12, 29);
    const std::string path = test::temp_path("engine_batch.mmgpt");
    test::write_random_model(path, cfg, 8, "", 0.4f, -1, layout);
    auto lm = LanguageModel::load(path);
    const std::vector<std::vector<int32_t>> prompts = {
        {1}, {2, 3, 4, 5, 6, 7, 8}, {9, 10, 11}, {12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}};
    for (bool greedy : {true, false}) {
      GenerateOptions opt;
      opt.max_new_tokens = 25;  // past the context of 12
      opt.sampling.greedy = greedy;
      opt.sampling.seed = 99;
      opt.sampling.top_k = 0;
      opt.sampling.temperature = 1.0f;
      std::vector<int> events(prompts.size());
      auto batch = lm.generate_batch(prompts, opt, [&](const TokenEvent& e) {
        events[e.sequence]++;
        return true;
      });
      REQUIRE(batch.size() == prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        auto alone = lm.generate(prompts[i], opt);
        CHECK_MESSAGE(batch[i].tokens == alone.tokens, "prompt " << i << (greedy ? " greedy" : " sampled"));
        CHECK(batch[i].tokens.size() == 25);
        CHECK(events[i] == 25);
      }
    }
  }
}

TEST_CASE("one LanguageModel used from several threads at once gives each call what it gives alone") {
  // The embedding API's promise (engine/mmgpt.hpp): const methods may run
  // concurrently. Each thread generates, batch-generates and scores on the
  // same model while the others do, inside their own TBB parallel loops; the
  // ThreadSanitizer stage (scripts/test-sanitizers.sh) runs this too.
  auto cfg = test::small_config(2, 4, 64, 48, 300);
  const std::string path = test::temp_path("engine_concurrent.mmgpt");
  test::write_random_model(path, cfg, 13, "", 0.3f, -1, Layout::Panel16);
  const auto lm = LanguageModel::load(path);
  constexpr size_t kThreads = 4;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < kThreads; ++i) prompts.push_back(random_ids(20 + 5 * i, cfg.vocab_size, 40 + i));
  auto options = [](size_t i) {
    GenerateOptions opt;
    opt.max_new_tokens = 40;  // past the context of 48 for the longer prompts
    opt.sampling.seed = 7 + i;
    opt.sampling.greedy = i % 2 == 0;
    return opt;
  };
  struct Result {
    std::vector<int32_t> tokens;
    std::vector<std::vector<int32_t>> batch;
    double nll = 0;
  };
  auto work = [&](size_t i) {
    Result r;
    r.tokens = lm.generate(prompts[i], options(i)).tokens;
    for (const auto& b : lm.generate_batch({prompts[i], prompts[(i + 1) % kThreads]}, options(i)))
      r.batch.push_back(b.tokens);
    PerplexityOptions po;
    po.ctx = 16;
    po.stride = 8;
    r.nll = lm.perplexity(prompts[i], po).mean_nll;
    return r;
  };
  std::vector<Result> alone(kThreads), together(kThreads);
  for (size_t i = 0; i < kThreads; ++i) alone[i] = work(i);
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < kThreads; ++i) threads.emplace_back([&, i] { together[i] = work(i); });
    for (auto& t : threads) t.join();
  }
  for (size_t i = 0; i < kThreads; ++i) {
    CAPTURE(i);
    CHECK(together[i].tokens.size() == 40);
    CHECK(together[i].tokens == alone[i].tokens);
    CHECK(together[i].batch == alone[i].batch);
    CHECK(together[i].nll == alone[i].nll);
  }
}

TEST_CASE("KV-cache storage: zero until written, 2 MiB-aligned, copies and moves keep the contents") {
  for (size_t floats : {size_t{1}, size_t{1031}, size_t{(3u << 20) / 4 + 7}}) {
    CAPTURE(floats);
    HugePageBuffer a(floats);
    REQUIRE(a.size() == floats);
    CHECK(reinterpret_cast<uintptr_t>(a.data()) % (size_t{2} << 20) == 0);
    CHECK(std::all_of(a.data(), a.data() + floats, [](float x) { return x == 0.0f; }));
    for (size_t i = 0; i < floats; ++i) a.data()[i] = static_cast<float>(i % 977);
    HugePageBuffer b(a);
    CHECK(b.data() != a.data());
    CHECK(std::equal(a.data(), a.data() + floats, b.data()));
    HugePageBuffer c(std::move(b));
    CHECK(b.size() == 0);
    CHECK(b.data() == nullptr);
    CHECK(std::equal(a.data(), a.data() + floats, c.data()));
    HugePageBuffer d(5);
    d = c;
    CHECK(std::equal(a.data(), a.data() + floats, d.data()));
    d = HugePageBuffer(3);
    CHECK(d.size() == 3);
    CHECK(d.data()[2] == 0.0f);
  }
  HugePageBuffer empty(0);
  CHECK(empty.data() == nullptr);
  HugePageBuffer copy(empty);
  CHECK(copy.size() == 0);
}

TEST_CASE("even split: consecutive blocks covering the items, sizes within one, the block of each item") {
  for (size_t n = 1; n <= 40; ++n)
    for (size_t parts = 1; parts <= n; ++parts) {
      CAPTURE(n);
      CAPTURE(parts);
      CHECK(even_split_begin(n, parts, 0) == 0);
      CHECK(even_split_begin(n, parts, parts) == n);
      size_t smallest = n, largest = 0;
      for (size_t b = 0; b < parts; ++b) {
        const size_t begin = even_split_begin(n, parts, b), end = even_split_begin(n, parts, b + 1);
        REQUIRE(begin < end);
        smallest = std::min(smallest, end - begin), largest = std::max(largest, end - begin);
        for (size_t i = begin; i < end; ++i) CHECK(even_split_block(n, parts, i) == b);
      }
      CHECK(largest - smallest <= 1);
    }
}

TEST_CASE("attention's blocks of heads for a decode step are the groups of a cache made for as many threads") {
  // causal_attention splits a token's heads into min(n_head, threads) blocks
  // (even_split_begin); the cache's groups must be the same heads, or a
  // block's keys are not one run of each cache block (kv_cache.hpp).
  for (uint32_t n_head : {1u, 3u, 5u, 12u, 16u, 25u})
    for (size_t threads = 1; threads <= 20; ++threads) {
      CAPTURE(n_head);
      CAPTURE(threads);
      const size_t blocks = std::min<size_t>(n_head, threads);
      KVCache cache(test::small_config(1, n_head, 8 * n_head, 8, 50), WeightType::F32, threads);
      REQUIRE(cache.groups() == blocks);
      for (size_t g = 0; g < blocks; ++g) {
        CHECK(even_split_begin(n_head, blocks, g) == cache.group_begin(g));
        CHECK(even_split_begin(n_head, blocks, g + 1) == cache.group_begin(g + 1));
      }
    }
}

// The KV cache's layout (engine/kv_cache.hpp): heads in groups, positions in
// blocks. Every (layer, head, position) row has a place of its own inside the
// storage, each group is a run of consecutive heads, and the rows of a group
// are where the blocks() the attention kernels read says.
TEST_CASE("KV-cache layout: each row its own place, where blocks() says, for any number of groups") {
  for (uint32_t n_head : {1u, 3u, 5u, 12u}) {
    for (size_t groups : {size_t{0}, size_t{1}, size_t{2}, size_t{5}, size_t{n_head}, size_t{40}}) {
      for (uint32_t n_ctx : {1u, 63u, 65u, 130u}) {
        for (WeightType dt : {WeightType::F32, WeightType::F16}) {
          CAPTURE(n_head);
          CAPTURE(groups);
          CAPTURE(n_ctx);
          ModelConfig cfg = test::small_config(2, n_head, 8 * n_head, n_ctx, 50);
          KVCache cache(cfg, dt, groups);
          const size_t hd = cache.head_dim(), elem = KVCache::element_bytes(dt);
          const size_t G = cache.groups();
          CHECK(G >= 1);
          CHECK(G <= n_head);
          if (groups != 0) CHECK(G == std::min<size_t>(groups, n_head));
          CHECK(cache.group_begin(0) == 0);
          CHECK(cache.group_begin(G) == n_head);
          for (size_t h = 0; h < n_head; ++h) {
            const size_t g = cache.group_of(h);
            REQUIRE(g < G);
            CHECK(cache.group_begin(g) <= h);
            CHECK(h < cache.group_begin(g + 1));
            CHECK(cache.group_begin(g) < cache.group_begin(g + 1));
          }
          const auto* base = static_cast<const uint8_t*>(cache.keys(0, 0));
          const size_t padded = (n_ctx + KVCache::kBlock - 1) / KVCache::kBlock * KVCache::kBlock;
          const size_t total = size_t{cfg.n_layer} * n_head * padded * hd * elem;
          std::vector<size_t> offsets;
          for (size_t l = 0; l < cfg.n_layer; ++l)
            for (size_t h = 0; h < n_head; ++h) {
              const size_t g = cache.group_of(h), first = cache.group_begin(g);
              const kernels::KVBlocks at = cache.blocks(g);
              CHECK(at.block == KVCache::kBlock);
              const auto* start = static_cast<const uint8_t*>(cache.keys(l, first));
              for (size_t p = 0; p < n_ctx; ++p) {
                const auto* row = static_cast<const uint8_t*>(cache.key_row(l, h, p));
                const size_t want =
                    ((p / at.block) * at.block_stride + (h - first) * at.head_stride + (p % at.block) * hd) * elem;
                CHECK(row == start + want);
                CHECK(static_cast<const uint8_t*>(cache.value_row(l, h, p)) -
                          static_cast<const uint8_t*>(cache.values(0, 0)) ==
                      row - base);
                offsets.push_back(static_cast<size_t>(row - base));
              }
            }
          std::sort(offsets.begin(), offsets.end());
          CHECK(offsets.front() == 0);
          CHECK(offsets.back() + hd * elem <= total);
          bool apart = true;
          for (size_t i = 1; i < offsets.size(); ++i) apart = apart && offsets[i] - offsets[i - 1] >= hd * elem;
          CHECK(apart);
        }
      }
    }
  }
}

// Attention reads the cache a group at a time (engine/attention.cpp), so how
// the heads are grouped must not change a bit: a prefill across a block
// boundary, then decode steps, on caches of 1, 2, 3 and n_kv_head groups,
// with 1 and 2 threads, f32 and f16 caches; GPT-2's attention, and grouped
// queries with rotary positions and a QK-norm (the prologue).
TEST_CASE(
    "attention gives the same bits whatever the KV cache's groups, the thread count and the chunks of a prefill") {
  for (bool modern : {false, true}) {
    CAPTURE(modern);
    const uint32_t n_head = modern ? 6 : 5, n_kv = modern ? 2 : 5;
    const size_t hd = 16, d = n_head * hd, prefill = 70, steps = 6;
    ModelConfig cfg = test::small_config(2, n_head, static_cast<uint32_t>(d), 128, 50);
    if (modern) {
      cfg.n_kv_head = n_kv;
      cfg.pos_embedding = PosEmbedding::Rotary;
      cfg.rope_dims = 12;
      cfg.norm = NormKind::RmsNorm;
      cfg.norm_bias = false;
      cfg.qk_norm = QkNorm::Plain;
      cfg.qk_norm_scale = 1.2f;
    }
    AttentionSpec spec = attention_spec(cfg);
    const size_t row = spec.row_width(), qw = spec.q_width(), half = cfg.rope_dims / 2;
    std::vector<float> cos((prefill + steps) * half), sin((prefill + steps) * half);
    const std::vector<float> inv = modern ? rope_inv_freq(cfg) : std::vector<float>{};
    for (size_t p = 0; modern && p < prefill + steps; ++p)
      rope_angles(inv, p, false, cos.data() + p * half, sin.data() + p * half);
    std::vector<float> qkv(row * (prefill + steps));
    uint32_t x = 12345;
    for (float& v : qkv) x = x * 1664525u + 1013904223u, v = static_cast<float>(x >> 8) / float(1 << 24) * 4.0f - 2.0f;
    auto call = [&](std::vector<float>& work, std::vector<float>& out, size_t t, size_t n, size_t l, KVCache& cache) {
      AttentionSpec a = spec;
      if (modern) a.rope_cos = cos.data() + t * half, a.rope_sin = sin.data() + t * half;
      causal_attention(work.data() + t * row, out.data() + t * qw, n, t, l, a, cache);
    };
    for (WeightType dt : {WeightType::F32, WeightType::F16}) {
      std::vector<float> want;
      // Chunks: the whole prefill in one call; one token a call, as decode
      // steps; and chunks of tiles of queries with some left over.
      for (size_t chunk : {prefill, size_t{1}, size_t{9}})
        for (size_t threads : {1, 2})
          for (size_t groups : {size_t{1}, size_t{2}, size_t{3}, size_t{n_kv}}) {
            CAPTURE(chunk);
            CAPTURE(threads);
            CAPTURE(groups);
            tbb::global_control c(tbb::global_control::max_allowed_parallelism, threads);
            KVCache cache(cfg, dt, groups);
            std::vector<float> out(qw * (prefill + steps), -1.0f);
            for (size_t l = 0; l < cfg.n_layer; ++l) {
              std::vector<float> work = qkv;  // the prologue rewrites queries and keys in place
              for (size_t t = 0; t < prefill; t += chunk) call(work, out, t, std::min(chunk, prefill - t), l, cache);
              for (size_t s = 0; s < steps; ++s) call(work, out, prefill + s, 1, l, cache);
            }
            if (want.empty()) want = out;
            CHECK(std::memcmp(want.data(), out.data(), out.size() * sizeof(float)) == 0);
          }
    }
  }
}
