// GPT-2 BPE encoding speed on tinyshakespeare (1.1 MB), one thread.
// The text: $MMGPT_BENCH_TEXT, else MMGPT_BENCH_TEXT_DEFAULT (the shared data dir).
// Every iteration starts cold: the only word cache lives inside one encode call.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "text/bpe.hpp"
#include "text/pretokenize.hpp"
#include "text/tokenizer.hpp"
#include "text/tokenizer_files.hpp"

namespace {

const std::string& text() {
  static const std::string t = [] {
    const char* env = std::getenv("MMGPT_BENCH_TEXT");
    const std::string path = env ? env : MMGPT_BENCH_TEXT_DEFAULT;
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("bench_tokenizer: cannot read " + path + " (set MMGPT_BENCH_TEXT)");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  return t;
}

const mmgpt::TokenizerData& data() {
  static const mmgpt::TokenizerData d = [] {
    auto x = mmgpt::read_bpe_files(MMGPT_SOURCE_DIR "/data/gpt2/encoder.json", MMGPT_SOURCE_DIR "/data/gpt2/vocab.bpe");
    x.eos_id = 50256;
    return x;
  }();
  return d;
}

void BM_Encode(benchmark::State& state) {
  const mmgpt::Tokenizer tok(data());
  size_t n = 0;
  for (auto _ : state) {
    auto ids = tok.encode(text());
    n = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text().size()));
  state.counters["tokens"] = static_cast<double>(n);
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond);

void BM_EncodeNoWordCache(benchmark::State& state) {
  const mmgpt::BpeModel bpe(data().tokens, data().merges);
  std::vector<int32_t> ids;
  for (auto _ : state) {
    ids.clear();
    bpe.encode(text(), ids, /*use_cache=*/false);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text().size()));
}
BENCHMARK(BM_EncodeNoWordCache)->Unit(benchmark::kMillisecond);

void BM_PreTokenize(benchmark::State& state) {
  for (auto _ : state) {
    mmgpt::Gpt2PreTokenizer pre(text());
    std::string_view piece;
    size_t count = 0;
    while (pre.next(piece)) ++count;
    benchmark::DoNotOptimize(count);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text().size()));
}
BENCHMARK(BM_PreTokenize)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
