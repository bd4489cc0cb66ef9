#pragma once
// mmgpt serve: an OpenAI-compatible HTTP server (cpp-httplib) over the
// continuous-batching Scheduler. docs/server.md describes the endpoints.
#include <cstddef>
#include <string>

#include "core/weight_type.hpp"

namespace mmgpt::server {

struct ServeOptions {
  std::string model_path;
  std::string model_id;  // the name clients give as "model"; default: the file's name without .mmgpt
  std::string host = "127.0.0.1";
  int port = 8080;         // 0: any free port (the ready line names it)
  size_t parallel = 0;     // running sequences; 0: from the memory their KV caches take, at most 16
  size_t max_queue = 64;   // requests waiting beyond those; more get 503
  size_t prefill_chunk = 256;
  size_t prefix_cache = 4;
  int threads = 0;         // 0: every core
  std::string api_key;     // non-empty: required as "Authorization: Bearer KEY" except on /health
  std::string chat_template_file;  // chat completions' template (a Jinja file or a tokenizer_config.json); empty: the model's
  WeightType kv_dtype = WeightType::F32;
  size_t max_body = 1 << 20;  // request body bytes (413 beyond)
  int timeout_seconds = 10;   // reading a request's header and body, writing a response
  double shutdown_grace = 5;  // seconds running requests may finish after SIGTERM
};

// Loads the model, serves until SIGTERM or SIGINT, then stops taking work,
// lets running requests finish within the grace period (cancelling the
// rest), and returns. Throws mmgpt::Error for a model or address it cannot use.
void serve(const ServeOptions& options);

}  // namespace mmgpt::server
