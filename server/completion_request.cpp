#include "server/completion_request.hpp"

#include <cmath>
#include <limits>

#include "formats/error.hpp"
#include "text/json_schema.hpp"

namespace mmgpt::server {

using nlohmann::json;

namespace {

// Deep enough for a JSON schema's nesting (text/json_schema.hpp allows 64 levels of schemas).
constexpr int kMaxDepth = 160;
constexpr size_t kMaxStops = 16;

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw RequestError(400, "'" + field + "' " + what, field);
}

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

uint64_t get_count(const json& body, const char* name, uint64_t max) {
  const json& v = *field(body, name);
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) {
    const uint64_t n = v.get<uint64_t>();
    if (n > max) bad(name, "must be at most " + std::to_string(max) + ", got " + std::to_string(n));
    return n;
  }
  if (v.is_number_integer()) bad(name, "must not be negative, got " + std::to_string(v.get<int64_t>()));
  bad(name, "must be a non-negative integer");
}

double get_number(const json& body, const char* name) {
  const json& v = *field(body, name);
  if (!v.is_number()) bad(name, "must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || std::abs(x) > std::numeric_limits<float>::max()) bad(name, "must be a finite number");
  return x;
}

bool get_bool(const json& body, const char* name) {
  const json& v = *field(body, name);
  if (!v.is_boolean()) bad(name, "must be true or false");
  return v.get<bool>();
}

std::vector<int32_t> get_ids(const json& v, const char* name) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& e : v) {
    if (!e.is_number_integer()) bad(name, "must be a string or an array of token ids");
    const bool fits = e.is_number_unsigned() ? e.get<uint64_t>() <= uint64_t{INT32_MAX}
                                             : e.get<int64_t>() >= 0 && e.get<int64_t>() <= INT32_MAX;
    if (!fits) bad(name, "holds token id " + e.dump() + ", outside the vocabulary");
    ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return ids;
}

template <class Json>
Json parse_body(std::string_view body) {
  try {
    Json j = Json::parse(body, [](int depth, typename Json::parse_event_t, Json&) {
      if (depth > kMaxDepth) throw RequestError(400, "the JSON body is nested too deeply");
      return true;
    });
    if (!j.is_object()) throw RequestError(400, "the request body must be a JSON object");
    return j;
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    if (const size_t colon = what.find("] "); colon != std::string::npos) what.erase(0, colon + 2);
    throw RequestError(400, "the request body is not valid JSON: " + what);
  }
}

// The sampling fields both endpoints take: temperature, top_p, top_k, min_p,
// repetition_penalty, seed, stop, ignore_eos, and the fields OpenAI defines
// that this server does not honour (refused unless given as their no-op).
void parse_sampling(const json& body, const CompletionDefaults& defaults, GenerateOptions& o, bool& seeded) {
  for (const char* name : {"presence_penalty", "frequency_penalty"})
    if (field(body, name) && get_number(body, name) != 0.0)
      bad(name, "is not supported (give 0; repetition_penalty is)");
  if (const json* v = field(body, "logit_bias"); v && !(v->is_object() && v->empty()))
    bad("logit_bias", "is not supported");
  SamplingOptions& s = o.sampling;
  s = defaults.sampling;
  if (field(body, "temperature")) {
    const double t = get_number(body, "temperature");
    if (t < 0) bad("temperature", "must not be negative (0 is greedy)");
    s.greedy = t == 0.0;
    if (t > 0) s.temperature = static_cast<float>(t);
  }
  if (field(body, "top_p")) {
    const double v = get_number(body, "top_p");
    if (!(v > 0 && v <= 1)) bad("top_p", "must be in (0, 1]");
    s.top_p = static_cast<float>(v);
  }
  if (field(body, "top_k")) s.top_k = static_cast<uint32_t>(get_count(body, "top_k", UINT32_MAX));
  if (field(body, "min_p")) {
    const double v = get_number(body, "min_p");
    if (!(v >= 0 && v < 1)) bad("min_p", "must be in [0, 1)");
    s.min_p = static_cast<float>(v);
  }
  for (const char* name : {"repetition_penalty", "repeat_penalty"})  // vLLM's name and llama.cpp's
    if (field(body, name)) {
      const double v = get_number(body, name);
      if (!(v > 0)) bad(name, "must be greater than 0 (1 = off)");
      s.repetition_penalty = static_cast<float>(v);
    }
  if (field(body, "seed")) {
    s.seed = get_count(body, "seed", UINT64_MAX);
    seeded = true;
  }
  if (const json* v = field(body, "stop")) {
    if (v->is_string()) {
      o.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > kMaxStops) bad("stop", "holds more than " + std::to_string(kMaxStops) + " strings");
      for (const json& e : *v) {
        if (!e.is_string()) bad("stop", "must be a string or an array of strings");
        o.stop.push_back(e.get<std::string>());
      }
    } else {
      bad("stop", "must be a string or an array of strings");
    }
  }
  if (field(body, "ignore_eos")) o.ignore_eos = get_bool(body, "ignore_eos");
}

// stream and stream_options.include_usage.
void parse_stream(const json& body, bool& stream, bool& include_usage) {
  if (field(body, "stream")) stream = get_bool(body, "stream");
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) bad("stream_options", "must be an object");
    if (field(*v, "include_usage")) {
      if (!(*v)["include_usage"].is_boolean()) bad("stream_options.include_usage", "must be true or false");
      include_usage = (*v)["include_usage"].get<bool>();
    }
  }
}

std::string parse_model(const json& body) {
  const json* v = field(body, "model");
  if (!v) return {};
  if (!v->is_string()) bad("model", "must be a string");
  return v->get<std::string>();
}

// response_format ({"type": "text" | "json_object" | "json_schema", ...}) and
// llama.cpp's grammar (GBNF text): at most one of them.
OutputConstraint parse_constraint(const nlohmann::ordered_json& body) {
  OutputConstraint c;
  const auto rf = body.find("response_format");
  const auto gr = body.find("grammar");
  const bool has_rf = rf != body.end() && !rf->is_null(), has_gr = gr != body.end() && !gr->is_null();
  if (has_gr) {
    if (!gr->is_string() || gr->get<std::string>().empty()) bad("grammar", "must be a non-empty GBNF grammar");
    if (has_rf && !((*rf).is_object() && (*rf).contains("type") && (*rf)["type"] == "text"))
      bad("grammar", "and 'response_format' both constrain the output: give one");
    c.gbnf = gr->get<std::string>();
    c.param = "grammar";
    return c;
  }
  if (!has_rf) return c;
  if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
    bad("response_format", "must be an object with a string 'type'");
  const std::string type = (*rf)["type"].get<std::string>();
  if (type == "text") return c;
  c.param = "response_format";
  if (type == "json_object") {
    c.gbnf = json_object_grammar();
    return c;
  }
  if (type != "json_schema")
    bad("response_format.type", "must be \"text\", \"json_object\" or \"json_schema\", not \"" + type + "\"");
  const auto js = rf->find("json_schema");
  if (js == rf->end() || !js->is_object()) bad("response_format.json_schema", "must be an object holding 'schema'");
  const auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null())
    bad("response_format.json_schema.schema", "is required");
  if (const auto strict = js->find("strict"); strict != js->end() && !strict->is_null() && !strict->is_boolean())
    bad("response_format.json_schema.strict", "must be true or false");
  c.param = "response_format.json_schema.schema";
  try {
    c.gbnf = json_schema_grammar(schema->dump(), "the schema");
  } catch (const Error& e) {
    throw RequestError(400, std::string("'response_format.json_schema.schema': ") + e.what(), c.param);
  }
  return c;
}

}  // namespace

json parse_json_body(std::string_view body) { return parse_body<json>(body); }
nlohmann::ordered_json parse_ordered_json_body(std::string_view body) {
  return parse_body<nlohmann::ordered_json>(body);
}

CompletionRequest parse_completion_request(const json& body, const CompletionDefaults& defaults) {
  return parse_completion_request(nlohmann::ordered_json(body), defaults);
}

CompletionRequest parse_completion_request(const nlohmann::ordered_json& ordered, const CompletionDefaults& defaults) {
  if (!ordered.is_object()) throw RequestError(400, "the request body must be a JSON object");
  const json body = ordered;  // the fields' checks; a schema keeps its keys' order
  CompletionRequest r;
  r.model = parse_model(body);

  // prompt: a string, token ids, or a list of either (one choice each).
  const json* p = field(body, "prompt");
  if (!p) throw RequestError(400, "'prompt' is required", "prompt");
  auto one = [&](const json& v, const std::string& name) {
    Prompt q;
    if (v.is_string())
      q.text = v.get<std::string>();
    else if (v.is_array())
      q.ids = get_ids(v, name.c_str());
    else
      bad(name, "must be a string or an array of token ids");
    if ((q.text && q.text->empty()) || (!q.text && q.ids.empty())) bad(name, "is empty");
    r.prompts.push_back(std::move(q));
  };
  if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    if (p->size() > kMaxChoices)
      bad("prompt", "holds " + std::to_string(p->size()) + " prompts; at most " + std::to_string(kMaxChoices));
    for (size_t i = 0; i < p->size(); ++i) {
      const json& e = (*p)[i];
      if (!e.is_string() && !e.is_array()) bad("prompt", "must be a list of strings or of token id lists");
      one(e, "prompt");
    }
  } else {
    one(*p, "prompt");
  }

  if (field(body, "n")) r.n = get_count(body, "n", kMaxN);
  if (r.n == 0) bad("n", "must be at least 1");
  if (r.n * r.prompts.size() > kMaxChoices)
    bad("n", "times the " + std::to_string(r.prompts.size()) + " prompts asks for " +
                 std::to_string(r.n * r.prompts.size()) + " completions; at most " + std::to_string(kMaxChoices));
  if (const json* v = field(body, "best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == int64_t(r.n)))
    bad("best_of", "is not supported: give n (best_of equal to n, or none)");
  if (field(body, "logprobs")) {
    r.options.top_logprobs = get_count(body, "logprobs", kMaxTopLogprobs);
    r.logprobs = r.options.logprobs = true;
  }
  if (const json* v = field(body, "suffix"); v && !(v->is_string() && v->get<std::string>().empty()))
    bad("suffix", "is not supported");
  r.options.max_new_tokens =
      field(body, "max_tokens") ? get_count(body, "max_tokens", uint64_t{1} << 24) : defaults.max_tokens;
  parse_sampling(body, defaults, r.options, r.seeded);
  if (field(body, "echo")) r.echo = get_bool(body, "echo");
  r.options.prompt_logprobs = r.echo && r.logprobs;
  parse_stream(body, r.stream, r.include_usage);
  r.constraint = parse_constraint(ordered);
  return r;
}

ChatRequest parse_chat_request(const nlohmann::ordered_json& ordered, const CompletionDefaults& defaults) {
  if (!ordered.is_object()) throw RequestError(400, "the request body must be a JSON object");
  const json body = ordered;  // the fields' checks; the messages keep their keys' order
  ChatRequest r;
  r.model = parse_model(body);

  const auto m = ordered.find("messages");
  if (m == ordered.end() || m->is_null()) throw RequestError(400, "'messages' is required", "messages");
  if (!m->is_array() || m->empty()) bad("messages", "must be a non-empty array of messages");
  for (size_t i = 0; i < m->size(); ++i) {
    const auto& msg = (*m)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) bad(at, "must be an object");
    const auto role = msg.find("role");
    if (role == msg.end() || !role->is_string() || role->get<std::string>().empty())
      bad(at + ".role", "must be a non-empty string");
    const auto content = msg.find("content");
    if (content != msg.end() && !content->is_null() && !content->is_string() && !content->is_array())
      bad(at + ".content", "must be a string, an array of content parts, or null");
    if (content != msg.end() && content->is_array())
      for (size_t k = 0; k < content->size(); ++k) {
        const auto& part = (*content)[k];
        const std::string pat = at + ".content[" + std::to_string(k) + "]";
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          bad(pat, "must be an object with a string 'type'");
        if (part["type"] != "text")
          bad(pat + ".type", "'" + part["type"].get<std::string>() + "' is not supported: this model reads text");
        if (!part.contains("text") || !part["text"].is_string()) bad(pat + ".text", "must be a string");
      }
  }
  r.messages = *m;

  if (field(body, "n")) r.n = get_count(body, "n", kMaxN);
  if (r.n == 0) bad("n", "must be at least 1");
  if (field(body, "logprobs")) r.logprobs = r.options.logprobs = get_bool(body, "logprobs");
  if (field(body, "top_logprobs")) {
    r.options.top_logprobs = get_count(body, "top_logprobs", kMaxTopLogprobs);
    if (!r.logprobs) bad("top_logprobs", "needs 'logprobs': true");
  }
  if (const json* v = field(body, "tools"); v && !(v->is_array() && v->empty()))
    bad("tools", "is not supported: this server does not call tools");
  if (const json* v = field(body, "tool_choice"); v && !(v->is_string() && v->get<std::string>() == "none"))
    bad("tool_choice", "is not supported: this server does not call tools");
  for (const char* name : {"functions", "function_call", "audio", "prediction", "web_search_options",
                           "reasoning_effort", "verbosity"})
    if (field(body, name)) bad(name, "is not supported");
  if (const json* v = field(body, "modalities"); v && !(*v == json::array({"text"})))
    bad("modalities", "is not supported: only [\"text\"]");
  if (const json* v = field(body, "store"); v && !(v->is_boolean() && !v->get<bool>()))
    bad("store", "is not supported: completions are not stored");
  if (const json* v = field(body, "service_tier");
      v && !(v->is_string() && (*v == "auto" || *v == "default")))
    bad("service_tier", "must be \"auto\" or \"default\"");

  // max_completion_tokens, or the older max_tokens; neither: up to the context's end.
  const bool new_name = field(body, "max_completion_tokens"), old_name = field(body, "max_tokens");
  if (new_name && old_name && body["max_completion_tokens"] != body["max_tokens"])
    bad("max_tokens", "and 'max_completion_tokens' differ: give one");
  if (new_name || old_name) {
    const char* name = new_name ? "max_completion_tokens" : "max_tokens";
    r.max_tokens = get_count(body, name, uint64_t{1} << 24);
  }
  parse_sampling(body, defaults, r.options, r.seeded);
  parse_stream(body, r.stream, r.include_usage);
  if (field(body, "add_generation_prompt")) r.add_generation_prompt = get_bool(body, "add_generation_prompt");
  if (const auto v = ordered.find("chat_template_kwargs"); v != ordered.end() && !v->is_null()) {
    if (!v->is_object()) bad("chat_template_kwargs", "must be an object");
    for (const auto& [name, value] : v->items())
      if (name == "messages" || name == "add_generation_prompt")
        bad("chat_template_kwargs." + name, "is set by the request itself");
    r.template_kwargs = *v;
  }
  r.constraint = parse_constraint(ordered);
  return r;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string error_body(const std::string& message, const std::string& type, const std::string& param,
                       const std::string& code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return dump(json{{"error", e}});
}

}  // namespace mmgpt::server
