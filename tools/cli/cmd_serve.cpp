// mmgpt serve: the OpenAI-compatible HTTP server (server/http_server.hpp).
#include <memory>

#include "tools/cli/commands.hpp"
#include "tools/cli/validate.hpp"
#if MMGPT_HAVE_SERVER
#include "server/http_server.hpp"
#endif

namespace mmgpt::cli {

namespace {

struct ServeArgs {
  std::string model, alias, host = "127.0.0.1", api_key, kv_dtype = "f32", chat_template;
  int port = 8080, threads = 0;
  size_t parallel = 0, max_queue = 64, prefill_chunk = 256, prefix_cache = 4, max_body = 1 << 20;
  int timeout = 10;
  double grace = 5;
};

}  // namespace

void add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "serve a model over HTTP with OpenAI's completions and chat APIs");
  cmd->add_option("-m,--model", a->model, "model file (.mmgpt)")->required()->check(non_empty("path"));
  cmd->add_option("--host", a->host, "address to listen on (default 127.0.0.1: this machine only)")
      ->check(non_empty("address"));
  cmd->add_option("--port", a->port, "port to listen on (default 8080; 0: any free port)")->check(count(0, 65535));
  cmd->add_option("--parallel", a->parallel,
                  "sequences generated together (default: as many KV caches as a quarter of the memory holds, "
                  "at most 16)")
      ->check(count(1, 4096));
  cmd->add_option("--threads", a->threads, "worker threads (default: all cores)")->check(thread_count());
  cmd->add_option("--api-key", a->api_key,
                  "require 'Authorization: Bearer KEY' on every endpoint but /health (or set MMGPT_API_KEY)")
      ->envname("MMGPT_API_KEY")
      ->check(non_empty("API key"));
  cmd->add_option("--chat-template", a->chat_template,
                  "the chat template of /v1/chat/completions: a Jinja file or a tokenizer_config.json "
                  "(default: the model's own)")
      ->check(non_empty("path"));
  add_kv_dtype_option(cmd, a->kv_dtype);
  cmd->add_option("--alias", a->alias, "the model's name in the API (default: the file's name without .mmgpt)")
      ->check(non_empty("name"));
  cmd->add_option("--max-queue", a->max_queue, "requests waiting for a place, beyond which 503 (default 64)")
      ->check(count(0, 1 << 20));
  cmd->add_option("--prefill-chunk", a->prefill_chunk,
                  "prompt tokens prefilled per step, so running sequences keep their pace (default 256)")
      ->check(count(1, 1 << 20));
  cmd->add_option("--prefix-cache", a->prefix_cache,
                  "KV caches kept beyond the running ones, for prompts that begin the same way (default 4; 0: "
                  "no prefix reuse)")
      ->check(count(0, 4096));
  cmd->add_option("--max-body", a->max_body, "largest request body in bytes, beyond which 413 (default 1048576)")
      ->check(count(1, uint64_t{1} << 30));
  cmd->add_option("--timeout", a->timeout, "seconds to read a request or write a response (default 10)")
      ->check(count(1, 3600));
  cmd->add_option("--shutdown-grace", a->grace,
                  "seconds running requests may finish after SIGTERM before they are cancelled (default 5)")
      ->check(real(0, false, 3600, false));
  cmd->callback([a]() {
#if MMGPT_HAVE_SERVER
    server::ServeOptions o;
    o.model_path = a->model;
    o.model_id = a->alias;
    o.host = a->host;
    o.port = a->port;
    o.parallel = a->parallel;
    o.max_queue = a->max_queue;
    o.prefill_chunk = a->prefill_chunk;
    o.prefix_cache = a->prefix_cache;
    o.threads = a->threads;
    o.api_key = a->api_key;
    o.chat_template_file = a->chat_template;
    o.kv_dtype = parse_kv_dtype(a->kv_dtype);
    o.max_body = a->max_body;
    o.timeout_seconds = a->timeout;
    o.shutdown_grace = a->grace;
    server::serve(o);
#else
    throw Error("this mmgpt was built without the server: install libcpp-httplib-dev (scripts/setup.sh) and build again");
#endif
  });
}

}  // namespace mmgpt::cli
