// mmgpt chat: a conversation with a model in the terminal, rendered with its
// chat template (text/chat_format.hpp) turn by turn and streamed as it is
// generated; or, with --messages, one reply to a conversation read from a file.
// Turns run through the Scheduler with a prefix cache, so a turn's prompt
// (the whole conversation so far) resumes from the cache of the turn before.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include <nlohmann/json.hpp>
#include <tbb/global_control.h>

#include "engine/mmgpt.hpp"
#include "engine/scheduler.hpp"
#include "text/chat_format.hpp"
#include "text/utf8.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/input_file.hpp"
#include "tools/cli/validate.hpp"

namespace mmgpt::cli {

namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct ChatArgs {
  std::string model, chat_template, messages_file, system, kv_dtype = "f32";
  size_t n = 1024;
  bool greedy = false, no_prefix_cache = false, stats = false;
  SamplingOptions sampling;
  std::optional<uint64_t> seed;
  int threads = 0;
};

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted = true; }

class Conversation {
 public:
  Conversation(const ChatArgs& a, const LanguageModel& lm, ChatFormat format)
      : a_(a), lm_(lm), format_(std::move(format)), scheduler_(lm, scheduler_options(a)) {}

  Json& messages() { return messages_; }

  // Generates the assistant's reply to the messages so far, printing it as it
  // comes; Ctrl-C ends it early. Returns the reply (what was printed).
  std::string reply() {
    const std::string prompt = format_.render(Json{{"messages", messages_}}, true);
    std::vector<int32_t> ids = lm_.encode(prompt);  // the template wrote the special tokens
    const size_t n_ctx = lm_.config().n_ctx;
    if (ids.size() >= n_ctx)
      throw Error("the conversation's " + std::to_string(ids.size()) + " tokens fill the context of " +
                  std::to_string(n_ctx) + ": /reset to start again");
    GenerateOptions o;
    o.max_new_tokens = std::min(a_.n, n_ctx - ids.size());
    o.sampling = a_.sampling;
    o.sampling.greedy = a_.greedy;
    // Each turn its own seed, derived from --seed: a conversation replays exactly.
    o.sampling.seed = (a_.seed ? *a_.seed : seed_) + turn_;
    o.kv_dtype = parse_kv_dtype(a_.kv_dtype);
    ++turn_;
    g_interrupted = false;
    const std::shared_ptr<Job> job = scheduler_.submit(std::move(ids), o);
    std::string text;
    for (;;) {
      if (g_interrupted.exchange(false)) job->cancel();
      JobUpdate u = job->wait(std::chrono::milliseconds(50));
      std::fwrite(u.text.data(), 1, u.text.size(), stdout);
      std::fflush(stdout);
      text += u.text;
      if (!u.finished) continue;
      if (!u.error.empty()) throw Error(u.error);
      if (a_.stats) {
        const double ttft = std::chrono::duration<double>(job->first_token() - job->submitted()).count();
        std::fprintf(stderr, "\n[turn %zu: %zu prompt tokens, %zu from the prefix cache; first token %.1f ms; %zu tokens]",
                     turn_, job->prompt_tokens(), job->cached_prompt_tokens(), ttft * 1e3, u.result.tokens.size());
      }
      if (u.result.reason == StopReason::Callback) std::fputs(" [stopped]", stderr);
      return text;
    }
  }

 private:
  static SchedulerOptions scheduler_options(const ChatArgs& a) {
    SchedulerOptions so;
    so.max_running = 1;
    so.max_queued = 1;
    so.prefix_cache = a.no_prefix_cache ? 0 : 1;
    so.kv_dtype = parse_kv_dtype(a.kv_dtype);
    return so;
  }

  const ChatArgs& a_;
  const LanguageModel& lm_;
  ChatFormat format_;
  Scheduler scheduler_;
  Json messages_ = Json::array();
  size_t turn_ = 0;
  const uint64_t seed_ = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
};

void run_chat(const ChatArgs& a) {
  std::unique_ptr<tbb::global_control> threads;
  if (a.threads > 0)
    threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, a.threads);
  const LanguageModel lm = LanguageModel::load(a.model);
  ChatFormat format = [&] {
    if (!a.chat_template.empty())
      return ChatFormat::from_text(read_input_file(a.chat_template, "chat template"), a.chat_template);
    if (lm.tokenizer().chat_json().empty())
      throw Error(a.model + ": the model's tokenizer has no chat template (give one with --chat-template FILE)");
    return ChatFormat::from_tokenizer(lm.tokenizer().chat_json(), a.model);
  }();
  Conversation chat(a, lm, std::move(format));

  // Ctrl-C ends the reply being generated, not the program (nor a line being typed).
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);

  if (!a.messages_file.empty()) {  // one reply to a conversation from a file
    Json given = Json::parse(read_input_file(a.messages_file, "messages file"), nullptr, false);
    if (given.is_object() && given.contains("messages")) given = given["messages"];
    if (!given.is_array() || given.empty())
      throw Error(a.messages_file + ": must hold a non-empty list of messages (or {\"messages\": [...]})");
    chat.messages() = std::move(given);
    chat.reply();
    std::fputc('\n', stdout);
    return;
  }

  const bool tty = isatty(STDIN_FILENO);
  auto set_system = [&](const std::string& text) {
    chat.messages() = Json::array();
    if (!text.empty()) chat.messages().push_back({{"role", "system"}, {"content", text}});
  };
  set_system(a.system);
  if (tty)
    std::fprintf(stderr, "mmgpt chat: %s. /reset starts again, /system TEXT sets the system message, Ctrl-C stops "
                         "a reply, Ctrl-D ends.\n", a.model.c_str());
  std::string line;
  for (;;) {
    if (tty) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) {
      if (g_interrupted.exchange(false) && !std::cin.eof()) {  // Ctrl-C at the prompt: a fresh line
        std::cin.clear();
        std::fputc('\n', stderr);
        continue;
      }
      break;
    }
    if (line == "/reset") {
      const Json system = !chat.messages().empty() && chat.messages()[0]["role"] == "system" ? chat.messages()[0] : Json();
      chat.messages() = Json::array();
      if (!system.is_null()) chat.messages().push_back(system);
      continue;
    }
    if (line.rfind("/system", 0) == 0 && (line.size() == 7 || line[7] == ' ')) {
      set_system(line.size() > 8 ? line.substr(8) : "");
      continue;
    }
    if (line.empty()) continue;
    chat.messages().push_back({{"role", "user"}, {"content", line}});
    try {
      // The reply as the next turn's template sees it: bytes that are not
      // UTF-8 (a reply cut inside a character, say) become U+FFFD there.
      const std::string reply = utf8::replace_invalid(chat.reply());
      chat.messages().push_back({{"role", "assistant"}, {"content", reply}});
    } catch (const Error& e) {
      chat.messages().erase(chat.messages().end() - 1);  // the turn did not happen
      std::fprintf(stderr, "mmgpt chat: %s", e.what());
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
}

}  // namespace

void add_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "chat with a model in the terminal, through its chat template");
  cmd->add_option("-m,--model", a->model, "model file (.mmgpt)")->required()->check(non_empty("path"));
  cmd->add_option("--chat-template", a->chat_template,
                  "the template: a Jinja file or a tokenizer_config.json (default: the model's own)")
      ->check(non_empty("path"));
  cmd->add_option("--messages", a->messages_file,
                  "one reply to the conversation in this JSON file (a list of messages), printed, then exit")
      ->check(non_empty("path"));
  cmd->add_option("--system", a->system, "the system message");
  cmd->add_option("-n,--n-tokens", a->n, "most tokens in one reply (default 1024; the context's end at most)")
      ->check(count(1, uint64_t{1} << 24));
  auto* greedy = cmd->add_flag("--greedy", a->greedy, "always pick the most likely token");
  auto* temp = cmd->add_option("--temperature", a->sampling.temperature, "sampling temperature (> 0; default 0.8)")
                   ->check(real(0, true, INFINITY, true, " (--greedy for argmax decoding)"));
  auto* topk = cmd->add_option("--top-k", a->sampling.top_k, "sample among the K most likely tokens (0 = all)")
                   ->check(count(0, UINT32_MAX));
  auto* topp = cmd->add_option("--top-p", a->sampling.top_p, "nucleus sampling (0 < P <= 1)")
                   ->check(real(0, true, 1, false));
  auto* minp = cmd->add_option("--min-p", a->sampling.min_p, "min-p sampling (0 <= P < 1)")->check(real(0, false, 1, true));
  for (CLI::Option* o : {temp, topk, topp, minp}) greedy->excludes(o);
  cmd->add_option("--repetition-penalty", a->sampling.repetition_penalty, "repetition penalty (default 1 = off)")
      ->check(real(0, true, INFINITY, true));
  cmd->add_option("--seed", a->seed, "random seed: turn k samples with seed + k, so a conversation replays exactly")
      ->check(count(0, UINT64_MAX));
  cmd->add_option("--threads", a->threads, "worker threads (default: all cores)")->check(thread_count());
  add_kv_dtype_option(cmd, a->kv_dtype);
  cmd->add_flag("--no-prefix-cache", a->no_prefix_cache,
                "prefill every turn's whole conversation again (the prefix cache otherwise resumes it)");
  cmd->add_flag("--stats", a->stats, "after each reply, its prompt tokens, those from the cache, and time to first token");
  cmd->callback([a]() {
    Sampler check(a->sampling);
    (void)check;
    run_chat(*a);
  });
}

}  // namespace mmgpt::cli
