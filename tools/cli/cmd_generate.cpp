// mmgpt generate: prompt(s) (text or ids) -> continuation(s), streamed to stdout.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>
#include <tbb/global_control.h>

#include "core/platform.hpp"
#include "engine/mmgpt.hpp"
#include "kernels/kernels.hpp"
#include "text/grammar.hpp"
#include "text/json_schema.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/input_file.hpp"
#include "tools/cli/token_ids.hpp"
#include "tools/cli/validate.hpp"

namespace mmgpt::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct GenerateArgs {
  std::string kv_dtype = "f32";
  std::string model, prompt, ids, batch_file;
  size_t n = 256;
  bool greedy = false;
  SamplingOptions sampling;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  int threads = 0;
  bool ignore_eos = false, print_ids = false, no_special = false, stats = false;
  bool ids_given = false;  // --ids "" is an empty id list, not "no --ids"
  std::optional<size_t> logprobs;  // --logprobs N: JSON Lines out, with each token's log-probabilities
  bool prompt_logprobs = false;
  std::string json_schema, grammar;  // files: constrained decoding
  bool json_object = false;
};

void write_out(std::string_view s) { std::fwrite(s.data(), 1, s.size(), stdout); }

std::vector<std::string> read_batch_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the batch file");
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back(line);  // blank lines separate nothing: skipped
  }
  if (in.bad()) throw Error(path + ": cannot read the batch file");
  if (prompts.empty()) throw Error(path + ": the batch file holds no prompt (one prompt per line)");
  return prompts;
}

void print_stats(const LanguageModel& lm, double load_s, double ttft_s, const std::vector<GenerationResult>& results) {
  size_t prompt_tokens = 0, generated = 0;
  for (const auto& r : results) prompt_tokens += r.timings.prompt_tokens, generated += r.tokens.size();
  const GenerationTimings& t = results.front().timings;
  const ModelFile& f = lm.model().file();
  std::fprintf(stderr, "\n--- stats (kernels: %s, threads: %zu)\n", std::string(kernels::isa_name()).c_str(),
               tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
  const LoadTimes& lt = lm.load_times();
  std::fprintf(stderr, "load          %8.2f ms  (map %.2f, validate %.2f, tokenizer %.2f)\n", load_s * 1e3, lt.map * 1e3,
               lt.validate * 1e3, lt.tokenizer * 1e3);
  std::fprintf(stderr, "prompt        %8zu tokens in %zu sequence(s)\n", prompt_tokens, results.size());
  std::fprintf(stderr, "prefill       %8.2f ms  %10.1f tokens/s\n", t.prefill_seconds * 1e3,
               t.prefill_seconds > 0 ? prompt_tokens / t.prefill_seconds : 0.0);
  std::fprintf(stderr, "decode        %8.2f ms  %10.1f tokens/s  (%zu tokens, %zu steps)\n", t.decode_seconds * 1e3,
               t.decode_seconds > 0 ? (generated - results.size()) / t.decode_seconds : 0.0, generated, t.decode_steps);
  std::fprintf(stderr, "first token   %8.2f ms\n", ttft_s * 1e3);
  // Decode steps (one token a sequence), by hint.
  std::fprintf(stderr, "prefetch      %s\n", kernels::describe_decode_prefetch().c_str());
  std::fprintf(stderr, "peak RSS      %8.1f MiB\n", platform::peak_rss_bytes() / 1048576.0);
  if (const std::optional<uint64_t> resident = f.resident_bytes())
    std::fprintf(stderr, "weights       %8.1f MiB mapped, %.1f MiB resident\n", f.file_size() / 1048576.0,
                 *resident / 1048576.0);
  else
    std::fprintf(stderr, "weights       %8.1f MiB mapped, resident unknown on this system\n",
                 f.file_size() / 1048576.0);
}

// A token's bytes as JSON text: the bytes, or an array of them when they are not valid UTF-8.
nlohmann::json piece_json(const Tokenizer& tokenizer, int32_t id) {
  const std::string bytes = tokenizer.token_bytes(id);
  try {
    (void)nlohmann::json(bytes).dump();
    return bytes;
  } catch (const nlohmann::json::exception&) {
    nlohmann::json raw = nlohmann::json::array();
    for (unsigned char b : bytes) raw.push_back(b);
    return raw;
  }
}

nlohmann::ordered_json positions_json(const Tokenizer& tokenizer, const std::vector<PositionLogprobs>& positions) {
  const bool pieces = tokenizer.kind() != TokenizerKind::None;
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const PositionLogprobs& p : positions) {
    nlohmann::ordered_json e = {{"token", p.token}};
    if (pieces) e["piece"] = piece_json(tokenizer, p.token);
    e["logprob"] = p.logprob;
    nlohmann::ordered_json top = nlohmann::ordered_json::array();
    for (const TokenLogprob& t : p.top) {
      nlohmann::ordered_json alt = {{"token", t.token}};
      if (pieces) alt["piece"] = piece_json(tokenizer, t.token);
      alt["logprob"] = t.logprob;
      top.push_back(std::move(alt));
    }
    e["top"] = std::move(top);
    out.push_back(std::move(e));
  }
  return out;
}


void run_generate(const GenerateArgs& a) {
  std::unique_ptr<tbb::global_control> threads;
  if (a.threads > 0)
    threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, a.threads);

  const Clock::time_point t_load = Clock::now();
  const LanguageModel lm = LanguageModel::load(a.model);
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  const ModelConfig& config = lm.config();
  const Tokenizer& tokenizer = lm.tokenizer();

  // Prompts: one (-p / --ids) or many (--batch-file, one per line, text or ids).
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> prompts;
  if (!a.batch_file.empty()) {
    texts = read_batch_file(a.batch_file);
    for (const std::string& t : texts) prompts.push_back(lm.encode(t, !a.no_special));
  } else if (a.ids_given) {
    prompts.push_back(parse_token_ids(a.ids, config.vocab_size));
    texts.push_back(tokenizer.kind() == TokenizerKind::None ? "" : lm.decode(prompts.back()));
  } else {
    if (a.prompt.empty()) throw Error("-p: the prompt is empty");
    prompts.push_back(lm.encode(a.prompt, !a.no_special));
    texts.push_back(a.prompt);
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    if (prompts[i].size() > config.n_ctx)
      std::fprintf(stderr, "mmgpt generate: note: prompt %zu has %zu tokens; using its last %u (the context length)\n",
                   i + 1, prompts[i].size(), config.n_ctx);

  const bool as_ids = a.print_ids || tokenizer.kind() == TokenizerKind::None;
  if (tokenizer.kind() == TokenizerKind::None && !a.print_ids)
    std::fprintf(stderr, "mmgpt generate: note: %s has no tokenizer; printing token ids\n", a.model.c_str());

  GenerateOptions options;
  options.max_new_tokens = a.n;
  options.ignore_eos = a.ignore_eos;
  options.stop = a.stop;
  options.kv_dtype = parse_kv_dtype(a.kv_dtype);
  options.sampling = a.sampling;
  options.sampling.greedy = a.greedy;
  options.sampling.seed = a.seed ? *a.seed : std::random_device{}();
  if (!a.json_schema.empty())
    options.grammar = Grammar::parse(json_schema_grammar(read_input_file(a.json_schema, "JSON schema file"), a.json_schema),
                                     a.json_schema + " (as a grammar)");
  else if (!a.grammar.empty())
    options.grammar = Grammar::parse(read_input_file(a.grammar, "grammar file"), a.grammar);
  else if (a.json_object)
    options.grammar = Grammar::parse(json_object_grammar(), "the JSON object grammar");

  if (a.logprobs || a.prompt_logprobs) {
    // One JSON object per prompt (JSON Lines), once generation ends.
    options.logprobs = a.logprobs.has_value();
    options.top_logprobs = a.logprobs.value_or(0);
    options.prompt_logprobs = a.prompt_logprobs;
    const std::vector<GenerationResult> results = lm.generate_batch(prompts, options);
    for (size_t i = 0; i < results.size(); ++i) {
      const GenerationResult& r = results[i];
      nlohmann::ordered_json line = {{"prompt_tokens", prompts[i].size()}, {"tokens", r.tokens}};
      if (tokenizer.kind() != TokenizerKind::None) line["text"] = r.text;
      line["stop_reason"] = stop_reason_name(r.reason);
      if (options.logprobs) line["logprobs"] = positions_json(tokenizer, r.logprobs);
      if (options.prompt_logprobs) line["prompt_logprobs"] = positions_json(tokenizer, r.prompt_logprobs);
      write_out(line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
      write_out("\n");
    }
    std::fflush(stdout);
    if (a.stats) print_stats(lm, load_s, 0.0, results);
    return;
  }

  const bool batch = !a.batch_file.empty();
  if (!batch && !as_ids) {
    write_out(texts[0]);  // the prompt, then the continuation as it is generated
    std::fflush(stdout);
  }

  const Clock::time_point t_start = Clock::now();
  double ttft_s = -1.0;
  bool printed_id = false;
  auto on_token = [&](const TokenEvent& e) {
    if (ttft_s < 0) ttft_s = std::chrono::duration<double>(Clock::now() - t_start).count();
    if (batch) return true;  // a batch is printed when complete, prompt by prompt
    if (as_ids) {
      if (e.token >= 0) std::printf(printed_id ? " %d" : "%d", e.token), printed_id = true;
    } else {
      write_out(e.text);
    }
    std::fflush(stdout);
    return true;
  };
  std::vector<GenerationResult> results = lm.generate_batch(prompts, options, on_token);

  if (!batch) {
    std::fputc('\n', stdout);
  } else {
    // One line of ids per prompt, or each prompt with its continuation followed by an empty line.
    for (size_t i = 0; i < results.size(); ++i) {
      if (as_ids) {
        for (size_t k = 0; k < results[i].tokens.size(); ++k) std::printf(k ? " %d" : "%d", results[i].tokens[k]);
        std::fputc('\n', stdout);
      } else {
        write_out(texts[i]);
        write_out(results[i].text);
        write_out("\n\n");
      }
    }
  }
  std::fflush(stdout);
  if (a.stats) print_stats(lm, load_s, ttft_s < 0 ? 0.0 : ttft_s, results);
}

}  // namespace

void add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt");
  cmd->add_option("-m,--model", a->model, "model file (.mmgpt)")->required()->check(non_empty("path"));
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "prompt text");
  auto* ids = cmd->add_option("--ids", a->ids, "prompt as token ids, e.g. \"1 2 3\"");
  auto* batch = cmd->add_option("--batch-file", a->batch_file,
                                "generate for every line of FILE (one prompt per line, blank lines skipped) together, "
                                "batched; prints each prompt with its continuation and an empty line")
                    ->check(non_empty("path"));
  p->excludes(ids)->excludes(batch);
  ids->excludes(batch);
  cmd->add_option("-n,--n-tokens", a->n, "number of tokens to generate (default 256)")
      ->check(count(0, uint64_t{1} << 24));
  auto* greedy = cmd->add_flag("--greedy", a->greedy, "always pick the most likely token");
  auto* temp = cmd->add_option("--temperature", a->sampling.temperature, "sampling temperature (> 0; default 0.8)")
                   ->check(real(0, true, INFINITY, true, " (--greedy for argmax decoding)"));
  auto* topk =
      cmd->add_option("--top-k", a->sampling.top_k, "sample among the K most likely tokens (0 = all; default 200)")
          ->check(count(0, UINT32_MAX));
  auto* topp = cmd->add_option("--top-p", a->sampling.top_p,
                               "sample among the most likely tokens whose probabilities add up to P (0 < P <= 1)")
                   ->check(real(0, true, 1, false));
  auto* minp = cmd->add_option("--min-p", a->sampling.min_p,
                               "drop tokens less likely than P times the most likely one (0 <= P < 1)")
                   ->check(real(0, false, 1, true));
  for (CLI::Option* o : {temp, topk, topp, minp}) greedy->excludes(o);
  cmd->add_option("--repetition-penalty", a->sampling.repetition_penalty,
                  "divide positive / multiply negative logits of tokens already seen (default 1 = off)")
      ->check(real(0, true, INFINITY, true));
  cmd->add_option("--seed", a->seed, "random seed: the same seed repeats a run exactly")->check(count(0, UINT64_MAX));
  cmd->add_option("--stop", a->stop, "stop when this string appears (not printed); may be given several times")
      ->allow_extra_args(false)
      ->check(non_empty("stop string"));
  cmd->add_option("--threads", a->threads, "worker threads (default: all cores)")->check(thread_count());
  add_kv_dtype_option(cmd, a->kv_dtype);
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating past the end-of-text token");
  cmd->add_flag("--no-special", a->no_special, "treat <|endoftext|> in a text prompt as plain text");
  cmd->add_flag("--print-ids", a->print_ids, "print only the generated token ids, space-separated, on one line");
  cmd->add_option("--logprobs", a->logprobs,
                  "print JSON Lines instead of text, one object per prompt, with each generated token's "
                  "log-probability and the N most likely tokens at its step (0 <= N <= 20)")
      ->check(count(0, kMaxTopLogprobs));
  cmd->add_flag("--prompt-logprobs", a->prompt_logprobs,
                "print JSON Lines (as --logprobs) with each prompt token's log-probability given the ones before "
                "it; -n 0 only scores the prompt");
  auto* schema = cmd->add_option("--json-schema", a->json_schema,
                                 "constrain the output to JSON that FILE's JSON schema accepts")
                     ->check(non_empty("path"));
  auto* grammar = cmd->add_option("--grammar", a->grammar, "constrain the output to FILE's GBNF grammar")
                      ->check(non_empty("path"));
  auto* json_object = cmd->add_flag("--json-object", a->json_object, "constrain the output to a JSON object");
  schema->excludes(grammar)->excludes(json_object);
  grammar->excludes(json_object);
  cmd->add_flag("--stats", a->stats, "print timings, memory and throughput on stderr");
  cmd->callback([a, p, ids, batch]() {
    if (p->count() == 0 && ids->count() == 0 && batch->count() == 0)
      throw Error("generate needs a prompt: -p TEXT, --ids \"I J K\" or --batch-file FILE");
    a->ids_given = ids->count() > 0;
    Sampler check(a->sampling);  // refuses out-of-range sampling options before the model is loaded
    (void)check;
    run_generate(*a);
  });
}

}  // namespace mmgpt::cli
