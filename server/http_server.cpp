#include "server/http_server.hpp"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <httplib.h>
#include <tbb/global_control.h>

#include "core/platform.hpp"
#include "engine/mmgpt.hpp"
#include "engine/scheduler.hpp"
#include "formats/error.hpp"
#include "server/completion_request.hpp"
#include "text/chat_format.hpp"
#include "text/grammar.hpp"
#include "server/metrics.hpp"

namespace mmgpt::server {

using nlohmann::json;
using Clock = SteadyClock;

namespace {

const char* status_text(int status) {
  switch (status) {
    case 400: return "bad request";
    case 401: return "unauthorized";
    case 404: return "not found";
    case 408: return "request timeout";
    case 411: return "length required";
    case 413: return "the request body is too large";
    case 414: return "the request URI is too long";
    case 429: return "too many requests";
    case 500: return "internal server error";
    case 503: return "service unavailable";
    default: return status >= 500 ? "server error" : "request error";
  }
}

const char* error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

void send_error(httplib::Response& res, const RequestError& e) {
  res.status = e.status;
  res.set_content(error_body(e.what(), e.type.empty() ? error_type(e.status) : e.type, e.param, e.code),
                  "application/json");
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s-%016llx%04llx", prefix, static_cast<unsigned long long>(salt),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffff));
  return buf;
}

bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// A client-chosen string as one log line: control bytes (a decoded %0A could forge lines) become '?'.
std::string loggable(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

std::string finish_reason(StopReason r) { return r == StopReason::Length ? "length" : "stop"; }

bool address_is(const sockaddr_storage& a, socklen_t len, const std::string& host, int port) {
  int p = -1;
  if (a.ss_family == AF_INET) p = ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) p = ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  char name[NI_MAXHOST];
  return p == port &&
         getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, name, sizeof name, nullptr, 0, NI_NUMERICHOST) == 0 &&
         host == name;
}

// The socket of a request's connection: the descriptor whose local and peer
// addresses are the request's (cpp-httplib 0.11 does not hand handlers their
// connection). The library closes it only after the handler returns. Linux
// (/proc/self/fd); elsewhere none is found.
std::optional<int> connection_socket(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return std::nullopt;
  std::optional<int> found;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
      continue;
    if (address_is(peer, peer_len, req.remote_addr, req.remote_port) &&
        address_is(local, local_len, req.local_addr, req.local_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

// Whether the client has closed (or reset) the connection. Waiting bytes (a
// pipelined request) count as a client still there.
bool client_closed(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

// The connection threads. At most `max_waiting` accepted connections wait
// for a free thread; beyond that the accepting thread waits too, and new
// connections wait in the kernel's listen queue: idle or slow clients cannot
// make the server hold file descriptors and memory without bound.
class ConnectionPool : public httplib::TaskQueue {
 public:
  ConnectionPool(size_t threads, size_t max_waiting) : max_waiting_(max_waiting) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }

  void enqueue(std::function<void()> fn) override {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] { return waiting_.size() < max_waiting_ || unbounded_; });
    waiting_.push_back(std::move(fn));
    ready_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  // Stops holding the accepting thread back (before the server stops, so that it sees the stop).
  void release() {
    {
      std::lock_guard lock(mutex_);
      unbounded_ = true;
    }
    room_.notify_all();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return stop_ || !waiting_.empty(); });
        if (waiting_.empty()) return;  // stopping, and nothing left
        fn = std::move(waiting_.front());
        waiting_.pop_front();
      }
      room_.notify_one();
      fn();
    }
  }
  const size_t max_waiting_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable ready_, room_;
  std::deque<std::function<void()>> waiting_;
  bool stop_ = false, unbounded_ = false;
};

// Whether bytes are valid UTF-8 (json's strict dump accepts them).
bool is_utf8(const std::string& bytes) {
  try {
    (void)json(bytes).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

// A token as the completions API's logprobs name it: its text, or
// "bytes:\xNN..." when it is not whole UTF-8 characters, as OpenAI writes it.
std::string legacy_token(const std::string& bytes) {
  if (is_utf8(bytes)) return bytes;
  std::string out = "bytes:";
  char buf[8];
  for (unsigned char b : bytes) {
    std::snprintf(buf, sizeof buf, "\\x%02x", b);
    out += buf;
  }
  return out;
}

// Characters in UTF-8 bytes (lead bytes; a stray continuation byte counts as none).
size_t characters(std::string_view bytes) {
  size_t n = 0;
  for (unsigned char b : bytes) n += (b & 0xC0) != 0x80;
  return n;
}

// One choice of a completion: its job, and what its answer has sent so far.
struct Choice {
  std::shared_ptr<Job> job;
  std::vector<int32_t> prompt;
  std::string echo;  // completions' echo: the prompt's text, before the completion's
  size_t index = 0;
  bool opened = false;    // streamed: its first event went out (chat: the role; completions: the echo)
  bool finished = false;  // streamed: its finish_reason went out
  size_t chars = 0;       // characters of its tokens' text so far (the legacy text_offset)
  size_t completion_tokens = 0;
};

// One request's completions and what their responses need, shared by its handler and stream provider.
struct Completion {
  std::string id, model;
  int64_t created = 0;
  bool chat = false;  // a chat completion: chat.completion(.chunk) objects
  bool include_usage = false;
  bool logprobs = false;       // log-probabilities go with each token
  bool echo_logprobs = false;  // completions with echo: the prompt's tokens too
  size_t prompt_tokens = 0;    // usage: every prompt's tokens, each prompt once
  std::string constraint_param;  // the field the output's grammar came from, for errors
  const Tokenizer* tokenizer = nullptr;
  std::vector<Choice> choices;

  // A response object around some choices' pieces.
  json envelope(json choices, bool streamed) const {
    const char* object = !chat ? "text_completion" : streamed ? "chat.completion.chunk" : "chat.completion";
    return {{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"choices", std::move(choices)}};
  }
  // A choice's piece: completions' text; chat's delta (streamed; the first
  // carries the role) or whole message.
  json piece(const Choice& c, const std::string& text, json logprobs, const json& reason, bool streamed,
             bool first = false) const {
    if (!chat)
      return {{"text", text}, {"index", c.index}, {"logprobs", std::move(logprobs)}, {"finish_reason", reason}};
    json out = {{"index", c.index}};
    if (streamed) {
      json delta = json::object();
      if (first) delta["role"] = "assistant";
      if (first || !text.empty()) delta["content"] = text;
      out["delta"] = std::move(delta);
    } else {
      out["message"] = {{"role", "assistant"}, {"content", text}};
    }
    out["logprobs"] = std::move(logprobs);
    out["finish_reason"] = reason;
    return out;
  }

  // The logprobs of tokens in this API's shape, or null when none were asked
  // for. Completions: {tokens, token_logprobs, top_logprobs, text_offset},
  // a prompt's first token with null values; chat: {content: [...]}.
  json no_logprobs() const {
    if (!logprobs) return nullptr;
    if (chat) return {{"content", json::array()}, {"refusal", nullptr}};
    return {{"tokens", json::array()},
            {"token_logprobs", json::array()},
            {"top_logprobs", json::array()},
            {"text_offset", json::array()}};
  }
  void add_logprobs(json& out, Choice& c, int32_t token, const PositionLogprobs* p) const {
    const std::string bytes = tokenizer->token_bytes(token);
    if (chat) {
      auto entry = [&](int32_t id, float logprob) {
        const std::string b = tokenizer->token_bytes(id);
        json raw = json::array();
        for (unsigned char x : b) raw.push_back(x);
        return json{{"token", b}, {"logprob", logprob}, {"bytes", std::move(raw)}};
      };
      json e = entry(token, p->logprob);
      e["top_logprobs"] = json::array();
      for (const TokenLogprob& t : p->top) e["top_logprobs"].push_back(entry(t.token, t.logprob));
      out["content"].push_back(std::move(e));
      return;
    }
    out["tokens"].push_back(legacy_token(bytes));
    out["text_offset"].push_back(c.chars);
    c.chars += characters(bytes);
    if (!p) {
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
      return;
    }
    out["token_logprobs"].push_back(p->logprob);
    json top = json::object();
    for (const TokenLogprob& t : p->top) top.emplace(legacy_token(tokenizer->token_bytes(t.token)), t.logprob);
    top.emplace(legacy_token(bytes), p->logprob);  // the chosen token is always there (up to N + 1 entries)
    out["top_logprobs"].push_back(std::move(top));
  }
  // The echoed prompt's logprobs: its first token has none.
  json prompt_logprobs(Choice& c, const std::vector<PositionLogprobs>& given) const {
    json out = no_logprobs();
    for (size_t i = 0; i < c.prompt.size(); ++i)
      add_logprobs(out, c, c.prompt[i], i == 0 || i - 1 >= given.size() ? nullptr : &given[i - 1]);
    return out;
  }
  // Generated tokens' logprobs, appended to `out` (an object no_logprobs() began).
  json generated_logprobs(Choice& c, const std::vector<PositionLogprobs>& given, json out) const {
    for (const PositionLogprobs& p : given) add_logprobs(out, c, p.token, &p);
    return out;
  }

  json usage() const {
    size_t completion = 0;
    for (const Choice& c : choices) completion += c.completion_tokens;
    return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion}, {"total_tokens", prompt_tokens + completion}};
  }
  void cancel() const {
    for (const Choice& c : choices)
      if (c.job) c.job->cancel();
  }
};

// The chat format chat completions render with: --chat-template FILE, else the model's own, else none.
std::optional<ChatFormat> chat_format_of(const ServeOptions& o, const LanguageModel& lm) {
  if (!o.chat_template_file.empty()) {
    std::ifstream in(o.chat_template_file, std::ios::binary);
    if (!in) throw Error("--chat-template: cannot read " + o.chat_template_file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return ChatFormat::from_text(text, o.chat_template_file);
  }
  if (lm.tokenizer().chat_json().empty()) return std::nullopt;
  return ChatFormat::from_tokenizer(lm.tokenizer().chat_json(), o.model_path);
}

class Service {
 public:
  Service(const ServeOptions& o, LanguageModel lm, const SchedulerOptions& so)
      : options_(o), lm_(std::move(lm)), scheduler_(lm_, so), chat_(chat_format_of(o, lm_)) {}

  void install(httplib::Server& svr);
  void begin_shutdown() { stopping_ = true; }
  int open_streams() const { return open_streams_; }
  Scheduler& scheduler() { return scheduler_; }

 private:
  void completions(const httplib::Request& req, httplib::Response& res);
  void chat_completions(const httplib::Request& req, httplib::Response& res);
  void check_model(const std::string& model) const;
  // Checks the prompt against the model, submits it and answers: the whole
  // completion, or its stream.
  // n completions of each prompt (the echoes, when given, come before them).
  void run(const httplib::Request& req, httplib::Response& res, std::vector<std::vector<int32_t>> prompts,
           std::vector<std::string> echoes, size_t n, GenerateOptions options, bool seeded, bool stream,
           std::shared_ptr<Completion> done);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  json model_object() const {
    return {{"id", options_.model_id}, {"object", "model"}, {"created", created_}, {"owned_by", "mmgpt"}};
  }
  void record(const Job& job, const GenerationResult& r, Clock::time_point end);
  // The compiled grammar of a request's constraint (null for none). The
  // latest few are kept by their text, so requests with the same schema share
  // the parse states and token masks their matchers learn.
  std::shared_ptr<const Grammar> grammar_for(const OutputConstraint& c);
  std::mutex grammars_mutex_;
  std::deque<std::pair<std::string, std::shared_ptr<const Grammar>>> grammars_;  // most recent last

  const ServeOptions& options_;
  LanguageModel lm_;
  Scheduler scheduler_;
  Metrics metrics_;
  std::optional<ChatFormat> chat_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> open_streams_{0};  // streamed responses still being written
  const int64_t created_ = static_cast<int64_t>(std::time(nullptr));
};

std::shared_ptr<const Grammar> Service::grammar_for(const OutputConstraint& c) {
  if (c.gbnf.empty()) return nullptr;
  {
    std::lock_guard lock(grammars_mutex_);
    for (auto it = grammars_.begin(); it != grammars_.end(); ++it)
      if (it->first == c.gbnf) {
        auto found = *it;
        grammars_.erase(it);
        grammars_.push_back(found);
        return found.second;
      }
  }
  std::shared_ptr<const Grammar> g;
  try {
    g = Grammar::parse(c.gbnf, c.param == "grammar" ? "the grammar" : "the schema's grammar");
  } catch (const Error& e) {
    throw RequestError(400, "'" + c.param + "': " + e.what(), c.param);
  }
  std::lock_guard lock(grammars_mutex_);
  grammars_.emplace_back(c.gbnf, g);
  constexpr size_t kKept = 16;
  while (grammars_.size() > kKept) grammars_.pop_front();
  return g;
}

void Service::record(const Job& job, const GenerationResult& r, Clock::time_point end) {
  metrics_.count_tokens(job.prompt_tokens(), r.tokens.size());
  if (r.tokens.empty()) return;
  metrics_.observe_first_token(seconds(job.first_token() - job.submitted()));
  if (r.tokens.size() > 1) metrics_.observe_token_interval(seconds(end - job.first_token()) / double(r.tokens.size() - 1));
}

void Service::install(httplib::Server& svr) {
  // Before the body is read: the API key, and chunked bodies (which the
  // library would read past the size limit).
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.has_header("Transfer-Encoding")) {
      res.set_header("Connection", "close");
      send_error(res, RequestError(411, "chunked request bodies are not supported: send Content-Length"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!options_.api_key.empty() && req.path != "/health" &&
        !same_secret(req.get_header_value("Authorization"), "Bearer " + options_.api_key)) {
      send_error(res, RequestError(401, "a valid API key is required: send 'Authorization: Bearer KEY'", {},
                                   "authentication_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Every status >= 400 passes here, ours and the library's (400 for broken
  // HTTP, 404, 413, 414): each gets an OpenAI-shaped body.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = status_text(res.status);
    if (res.status == 404) message = "no such endpoint: " + req.method + " " + req.path;
    res.set_content(error_body(message, error_type(res.status)), "application/json");
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(error_body(message, "server_error"), "application/json");
  });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.count_response(res.status);
    std::fprintf(stderr, "mmgpt serve: %s %s %s -> %d\n", req.remote_addr.c_str(), loggable(req.method).c_str(),
                 loggable(req.path).c_str(), res.status);
  });

  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    res.status = stopping_ ? 503 : 200;
    res.set_content(stopping_ ? R"({"status":"shutting down"})" : R"({"status":"ok"})", "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(scheduler_.stats()), "text/plain; version=0.0.4");
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({model_object()})}}), "application/json");
  });
  svr.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != options_.model_id)
      return send_error(res, RequestError(404, "the model '" + std::string(req.matches[1]) + "' does not exist",
                                          "model", "invalid_request_error", "model_not_found"));
    res.set_content(dump(model_object()), "application/json");
  });
  auto guarded = [this](void (Service::*handler)(const httplib::Request&, httplib::Response&)) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      try {
        (this->*handler)(req, res);
      } catch (const RequestError& e) {
        send_error(res, e);
      } catch (const SchedulerFull& e) {
        res.set_header("Retry-After", "1");
        send_error(res, RequestError(503, e.what(), {}, "unavailable_error"));
      } catch (const Error& e) {  // the engine refused the request (ids, lengths, options)
        send_error(res, RequestError(400, e.what()));
      }
    };
  };
  svr.Post("/v1/completions", guarded(&Service::completions));
  svr.Post("/v1/chat/completions", guarded(&Service::chat_completions));
  svr.Post("/tokenize", guarded(&Service::tokenize));
  svr.Post("/detokenize", guarded(&Service::detokenize));
}

void Service::check_model(const std::string& model) const {
  if (!model.empty() && model != options_.model_id)
    throw RequestError(404, "the model '" + model + "' does not exist (this server has '" + options_.model_id + "')",
                       "model", "invalid_request_error", "model_not_found");
}

void Service::completions(const httplib::Request& req, httplib::Response& res) {
  if (stopping_) throw SchedulerFull("the server is shutting down");
  CompletionRequest r = parse_completion_request(parse_ordered_json_body(req.body));
  check_model(r.model);
  r.options.grammar = grammar_for(r.constraint);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echoes;
  for (Prompt& p : r.prompts) {
    if (p.text) {
      if (lm_.tokenizer().kind() == TokenizerKind::None)
        throw RequestError(400, "this model has no tokenizer: give the prompt as token ids", "prompt");
      prompts.push_back(lm_.encode(*p.text));
    } else {
      prompts.push_back(std::move(p.ids));
    }
    if (r.echo) echoes.push_back(p.text ? *p.text : lm_.decode(prompts.back()));
  }
  auto done = std::make_shared<Completion>();
  done->id = random_id("cmpl");
  done->include_usage = r.include_usage;
  done->logprobs = r.logprobs;
  done->echo_logprobs = r.echo && r.logprobs;
  done->constraint_param = r.constraint.param;
  run(req, res, std::move(prompts), std::move(echoes), r.n, std::move(r.options), r.seeded, r.stream,
      std::move(done));
}

void Service::chat_completions(const httplib::Request& req, httplib::Response& res) {
  if (stopping_) throw SchedulerFull("the server is shutting down");
  ChatRequest r = parse_chat_request(parse_ordered_json_body(req.body));
  check_model(r.model);
  r.options.grammar = grammar_for(r.constraint);
  if (!chat_)
    throw RequestError(400,
                       "this model has no chat template: its tokenizer came without one (start the server with "
                       "--chat-template FILE, or use /v1/completions)",
                       "messages");
  nlohmann::ordered_json variables = std::move(r.template_kwargs);
  variables["messages"] = std::move(r.messages);
  std::string prompt;
  try {
    prompt = chat_->render(std::move(variables), r.add_generation_prompt);
  } catch (const Error& e) {  // the template refused the conversation (raise_exception) or reached a limit
    throw RequestError(400, std::string("the chat template: ") + e.what(), "messages");
  }
  // The template writes the special tokens itself: none are added again, as transformers does.
  std::vector<int32_t> ids = lm_.encode(prompt);
  if (ids.empty()) throw RequestError(400, "the chat template rendered an empty prompt", "messages");
  const size_t n_ctx = lm_.config().n_ctx;
  r.options.max_new_tokens = r.max_tokens ? *r.max_tokens : (ids.size() < n_ctx ? n_ctx - ids.size() : 0);
  auto done = std::make_shared<Completion>();
  done->id = random_id("chatcmpl");
  done->chat = true;
  done->include_usage = r.include_usage;
  done->logprobs = r.logprobs;
  done->constraint_param = r.constraint.param;
  std::vector<std::vector<int32_t>> prompts;
  prompts.push_back(std::move(ids));
  run(req, res, std::move(prompts), {}, r.n, std::move(r.options), r.seeded, r.stream, std::move(done));
}

void Service::run(const httplib::Request& req, httplib::Response& res, std::vector<std::vector<int32_t>> prompts,
                  std::vector<std::string> echoes, size_t n, GenerateOptions options, bool seeded, bool stream,
                  std::shared_ptr<Completion> done) {
  const ModelConfig& c = lm_.config();
  for (const std::vector<int32_t>& ids : prompts) {
    for (int32_t id : ids)
      if (static_cast<uint64_t>(id) >= c.vocab_size)
        throw RequestError(400, "'prompt' holds token id " + std::to_string(id) + ", outside the vocabulary (0.." +
                                    std::to_string(c.vocab_size - 1) + ")",
                           "prompt");
    if (ids.size() + options.max_new_tokens > c.n_ctx)
      throw RequestError(400,
                         "the prompt's " + std::to_string(ids.size()) + " tokens and max_tokens " +
                             std::to_string(options.max_new_tokens) + " exceed the context length " +
                             std::to_string(c.n_ctx),
                         "max_tokens", "invalid_request_error", "context_length_exceeded");
  }
  const size_t count = prompts.size() * n;
  if (count > scheduler_.options().max_queued)
    throw RequestError(400,
                       "the request asks for " + std::to_string(count) + " completions; this server queues at most " +
                           std::to_string(scheduler_.options().max_queued) + " (mmgpt serve --max-queue)",
                       prompts.size() > 1 ? "prompt" : "n");
  if (!seeded) options.sampling.seed = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  options.kv_dtype = scheduler_.options().kv_dtype;
  if (options.grammar) {  // a grammar no token of this vocabulary can begin is refused now, not mid-run
    GrammarMatcher first(options.grammar, lm_.tokenizer().token_trie(c.vocab_size));
    std::vector<float> logits(c.vocab_size, 0.0f);
    try {
      first.mask(logits);
    } catch (const Error& e) {
      throw RequestError(400, std::string("'") + done->constraint_param + "': " + e.what(), done->constraint_param);
    }
  }

  done->model = options_.model_id;
  done->created = static_cast<int64_t>(std::time(nullptr));
  done->tokenizer = &lm_.tokenizer();
  // Choice p * n + j: prompt p with seed + j, so a prompt's first choice is what it gives alone.
  std::vector<std::vector<int32_t>> queued;
  std::vector<GenerateOptions> queued_options;
  for (size_t p = 0; p < prompts.size(); ++p) {
    done->prompt_tokens += prompts[p].size();
    for (size_t j = 0; j < n; ++j) {
      Choice choice;
      choice.prompt = prompts[p];
      if (!echoes.empty()) choice.echo = echoes[p];
      choice.index = done->choices.size();
      done->choices.push_back(std::move(choice));
      queued.push_back(prompts[p]);
      queued_options.push_back(options);
      queued_options.back().sampling.seed = options.sampling.seed + j;
    }
  }
  std::vector<std::shared_ptr<Job>> jobs = scheduler_.submit_all(std::move(queued), queued_options);
  for (size_t i = 0; i < jobs.size(); ++i) done->choices[i].job = std::move(jobs[i]);

  if (!stream) {
    struct CancelLeft {  // a failed or abandoned request leaves nothing running
      const Completion& done;
      ~CancelLeft() { done.cancel(); }
    } cancel_left{*done};
    // While they run, a client that closes its connection cancels them (checked every 50 ms).
    std::optional<int> socket;
    bool looked = false, gone = false;
    Clock::time_point next_check = Clock::now() + std::chrono::milliseconds(50);
    json pieces = json::array();
    for (Choice& choice : done->choices) {
      JobUpdate u;
      while (!(u = choice.job->wait(std::chrono::milliseconds(50))).finished) {
        if (gone || Clock::now() < next_check) continue;
        next_check += std::chrono::milliseconds(50);
        if (!looked) socket = connection_socket(req);
        looked = true;
        if (socket && client_closed(*socket)) {
          gone = true;
          done->cancel();
        }
      }
      if (gone) continue;
      if (!u.error.empty() && u.request_error) throw RequestError(400, u.error);
      if (!u.error.empty()) throw RequestError(503, u.error, {}, "unavailable_error");
      if (u.result.reason == StopReason::Callback)
        throw RequestError(503, "the server shut down before the completion finished", {}, "unavailable_error");
      record(*choice.job, u.result, Clock::now());
      choice.completion_tokens = u.result.tokens.size();
      json logprobs = nullptr;
      if (done->logprobs) {
        logprobs = done->generated_logprobs(
            choice, u.result.logprobs,
            done->echo_logprobs ? done->prompt_logprobs(choice, u.result.prompt_logprobs) : done->no_logprobs());
      }
      pieces.push_back(done->piece(choice, choice.echo + u.result.text, std::move(logprobs),
                                   finish_reason(u.result.reason), /*streamed=*/false));
    }
    if (gone) {
      res.status = 499;  // as nginx logs it: the client closed the connection; nobody reads this
      return;
    }
    json out = done->envelope(std::move(pieces), false);
    out["usage"] = done->usage();
    res.set_content(dump(out), "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  ++open_streams_;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, done](size_t, httplib::DataSink& sink) {
        // Runs on this connection's worker after the handler returned: nothing may throw out of it.
        try {
          size_t events = 0;
          auto event = [&](const json& j) {
            const std::string s = "data: " + dump(j) + "\n\n";
            ++events;
            return sink.write(s.data(), s.size());
          };
          auto send = [&](Choice& choice, const std::string& text, json logprobs, const json& reason,
                          bool first = false) {
            return event(done->envelope(json::array({done->piece(choice, text, std::move(logprobs), reason, true, first)}),
                                        true));
          };
          auto end = [&] {
            const char last[] = "data: [DONE]\n\n";
            sink.write(last, sizeof last - 1);
            sink.done();
            return true;
          };
          // A choice's update as events; false when the stream is over (the client left, or a job failed).
          bool failed = false;
          auto deliver = [&](Choice& choice, JobUpdate& u) {
            if (!choice.opened && done->echo_logprobs && !u.finished && u.new_tokens == 0) return true;  // its prompt's logprobs come with the first token
            if (!choice.opened) {
              choice.opened = true;
              if (done->chat) {
                if (!send(choice, "", done->no_logprobs(), nullptr, true)) return false;
              } else if (done->echo_logprobs) {
                const std::vector<PositionLogprobs>& given =
                    u.prompt_logprobs.empty() ? u.result.prompt_logprobs : u.prompt_logprobs;
                if (!send(choice, choice.echo, done->prompt_logprobs(choice, given), nullptr)) return false;
              } else if (!choice.echo.empty() && !send(choice, choice.echo, done->no_logprobs(), nullptr)) {
                return false;
              }
            }
            if ((!u.text.empty() || !u.logprobs.empty()) &&
                !send(choice, u.text, done->logprobs ? done->generated_logprobs(choice, u.logprobs, done->no_logprobs()) : json(nullptr),
                      nullptr))
              return false;
            if (!u.finished) return true;
            if (!u.error.empty() || u.result.reason == StopReason::Callback) {
              const std::string why = u.error.empty() ? "the server shut down before the completion finished" : u.error;
              event(json::parse(error_body(why, u.request_error ? "invalid_request_error" : "unavailable_error")));
              failed = true;
              return false;
            }
            record(*choice.job, u.result, Clock::now());
            choice.completion_tokens = u.result.tokens.size();
            choice.finished = true;
            return send(choice, "", done->no_logprobs(), finish_reason(u.result.reason));
          };
          // Every choice's news; when none has any, a wait on the first unfinished one.
          for (Choice& choice : done->choices) {
            if (choice.finished) continue;
            JobUpdate u = choice.job->wait(std::chrono::milliseconds(0));
            if (!deliver(choice, u)) return failed ? end() : false;
          }
          if (events == 0)
            for (Choice& choice : done->choices) {
              if (choice.finished) continue;
              JobUpdate u = choice.job->wait(std::chrono::milliseconds(200));
              if (!deliver(choice, u)) return failed ? end() : false;
              break;
            }
          if (std::all_of(done->choices.begin(), done->choices.end(), [](const Choice& c) { return c.finished; })) {
            if (done->include_usage) {
              json usage = done->envelope(json::array(), true);
              usage["usage"] = done->usage();
              if (!event(usage)) return false;
            }
            return end();
          }
          // Nothing new: a client that has gone away cancels its sequences.
          return events > 0 ? true : sink.is_writable();
        } catch (...) {
          return false;
        }
      },
      [this, done](bool) {
        done->cancel();
        --open_streams_;
      });
}

void Service::tokenize(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_json_body(req.body);
  const auto it = body.find("content");
  if (it == body.end() || !it->is_string()) throw RequestError(400, "'content' must be a string", "content");
  bool with_pieces = false;
  if (auto p = body.find("with_pieces"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) throw RequestError(400, "'with_pieces' must be true or false", "with_pieces");
    with_pieces = p->get<bool>();
  }
  if (lm_.tokenizer().kind() == TokenizerKind::None) throw RequestError(400, "this model has no tokenizer");
  const std::vector<int32_t> ids = lm_.encode(it->get<std::string>());
  json tokens = json::array();
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string bytes = lm_.tokenizer().token_bytes(id);
    json piece = bytes;
    if (!is_utf8(bytes)) {  // the piece as text, otherwise its bytes (as llama.cpp does)
      piece = json::array();
      for (unsigned char b : bytes) piece.push_back(b);
    }
    tokens.push_back({{"id", id}, {"piece", piece}});
  }
  res.set_content(dump(json{{"tokens", tokens}}), "application/json");
}

void Service::detokenize(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_json_body(req.body);
  const auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) throw RequestError(400, "'tokens' must be an array of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const json& e : *it) {
    bool ok = e.is_number_integer();
    uint64_t id = 0;
    if (ok && e.is_number_unsigned()) id = e.get<uint64_t>();
    else if (ok) ok = e.get<int64_t>() >= 0, id = static_cast<uint64_t>(e.get<int64_t>());
    if (!ok || id >= lm_.config().vocab_size)
      throw RequestError(400, "'tokens' holds " + dump(e) + ", not a token id of this model (0.." +
                                  std::to_string(lm_.config().vocab_size - 1) + ")",
                         "tokens");
    ids.push_back(static_cast<int32_t>(id));
  }
  if (lm_.tokenizer().kind() == TokenizerKind::None) throw RequestError(400, "this model has no tokenizer");
  res.set_content(dump(json{{"content", lm_.decode(ids)}}), "application/json");
}

size_t default_parallel(const LanguageModel& lm, WeightType kv, size_t prefix_cache) {
  const ModelConfig& c = lm.config();
  const uint64_t per_sequence = uint64_t{2} * c.n_layer * c.n_ctx * c.kv_width() * KVCache::element_bytes(kv);
  const uint64_t budget = platform::physical_memory_bytes() / 4;  // a quarter of the machine for KV caches
  const uint64_t fits = per_sequence ? budget / per_sequence : 16;
  return static_cast<size_t>(std::clamp<uint64_t>(fits > prefix_cache ? fits - prefix_cache : 1, 1, 16));
}

}  // namespace

void serve(const ServeOptions& given) {
  ServeOptions o = given;
  const WeightType kv = o.kv_dtype;
  std::unique_ptr<tbb::global_control> threads;
  if (o.threads > 0)
    threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, o.threads);
  if (o.model_id.empty()) o.model_id = std::filesystem::path(o.model_path).stem().string();

  // SIGTERM and SIGINT are taken by sigwait below: blocked in every thread started from here on.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  LanguageModel lm = LanguageModel::load(o.model_path);
  SchedulerOptions so;
  so.max_running = o.parallel ? o.parallel : default_parallel(lm, kv, o.prefix_cache);
  so.max_queued = o.max_queue;
  so.prefill_chunk = o.prefill_chunk;
  so.prefix_cache = o.prefix_cache;
  so.kv_dtype = kv;
  Service service(o, lm, so);

  httplib::Server svr;
  const size_t workers = so.max_running + so.max_queued + 8;  // a thread per running or queued request, and spare
  std::atomic<ConnectionPool*> pool{nullptr};
  svr.new_task_queue = [workers, &pool] {
    pool = new ConnectionPool(workers, workers);  // owned by the server, which deletes it after shutdown()
    return pool.load();
  };
  int listen_socket = -1;
  svr.set_socket_options([&listen_socket](int sock) {
    int yes = 1;  // the library's default, SO_REUSEPORT, would let a second server share a busy port silently
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_socket = sock;
  });
  svr.set_payload_max_length(o.max_body);
  svr.set_read_timeout(o.timeout_seconds, 0);
  svr.set_write_timeout(o.timeout_seconds, 0);
  svr.set_keep_alive_timeout(5);
  service.install(svr);

  int port = o.port;
  if (port == 0) {
    port = svr.bind_to_any_port(o.host);
    if (port < 0) throw Error("cannot listen on " + o.host + ": no free port, or not an address of this machine");
  } else if (!svr.bind_to_port(o.host, port)) {
    throw Error("cannot listen on " + o.host + ":" + std::to_string(port) +
                ": the port is in use, or the address is not one of this machine's");
  }
  // The library listens with a backlog of 5: a burst of clients connecting at
  // once would wait for SYN retransmits. Listening again raises it.
  if (listen_socket >= 0) ::listen(listen_socket, SOMAXCONN);
  std::atomic<bool> listen_failed{false};
  std::thread listener([&] {
    if (!svr.listen_after_bind()) {
      listen_failed = true;
      kill(getpid(), SIGTERM);
    }
  });
  while (!svr.is_running() && !listen_failed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::printf("mmgpt serve: listening on http://%s:%d (model %s, %zu parallel, KV %s)\n", o.host.c_str(), port,
              o.model_id.c_str(), so.max_running, std::string(weight_type_info(kv).name).c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "mmgpt serve: %s: finishing running requests (at most %.0f s)\n",
               sig == SIGINT ? "interrupted" : "terminated", o.shutdown_grace);
  service.begin_shutdown();
  service.scheduler().drain(Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_grace * 1000)));
  // Every job has ended; streams still writing their last events get a moment
  // to send them and [DONE] (stopping the library ends a stream where it is).
  for (int i = 0; i < 200 && service.open_streams() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (ConnectionPool* p = pool.load()) p->release();
  svr.stop();
  listener.join();
  if (listen_failed) throw Error("the server stopped accepting connections");
}

}  // namespace mmgpt::server
