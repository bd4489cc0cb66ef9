// mmgpt serve's request parsing (server/completion_request.hpp): every field
// of OpenAI's completions request and llama.cpp's extensions, their defaults,
// and a 400 naming the field for each wrong type or range.
#include <doctest/doctest.h>

#include <string>

#include "server/completion_request.hpp"

using namespace mmgpt;
using namespace mmgpt::server;
using nlohmann::json;

namespace {

CompletionRequest parse(const std::string& body) { return parse_completion_request(parse_json_body(body)); }

// The field a refused body names (empty when the error names none).
std::string refused_param(const std::string& body) {
  try {
    parse(body);
  } catch (const RequestError& e) {
    CHECK(e.status == 400);
    return e.param.empty() ? "(none)" : e.param;
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("completion request: defaults, and every field read") {
  const CompletionRequest d = parse(R"({"prompt": "Hi"})");
  REQUIRE(d.prompts.size() == 1);
  CHECK(*d.prompts[0].text == "Hi");
  CHECK(d.n == 1);
  CHECK_FALSE(d.logprobs);
  CHECK_FALSE(d.options.logprobs);
  CHECK_FALSE(d.options.prompt_logprobs);
  CHECK(d.options.max_new_tokens == 16);
  CHECK_FALSE(d.options.sampling.greedy);
  CHECK(d.options.sampling.temperature == doctest::Approx(0.8));
  CHECK(d.options.sampling.top_k == 200);
  CHECK_FALSE(d.seeded);
  CHECK_FALSE(d.stream);

  const CompletionRequest r = parse(R"({"model": "m", "prompt": "Hi", "max_tokens": 20, "temperature": 0.5,
      "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.3, "seed": 18446744073709551615,
      "stop": ["\n", "END"], "stream": true, "stream_options": {"include_usage": true}, "echo": true,
      "ignore_eos": true, "n": 1, "best_of": 1, "logprobs": null, "presence_penalty": 0, "logit_bias": {},
      "user": "u", "unknown_field": [1, 2]})");
  CHECK(r.model == "m");
  CHECK(r.options.max_new_tokens == 20);
  CHECK(r.options.sampling.temperature == doctest::Approx(0.5));
  CHECK(r.options.sampling.top_p == doctest::Approx(0.9));
  CHECK(r.options.sampling.top_k == 40);
  CHECK(r.options.sampling.min_p == doctest::Approx(0.05));
  CHECK(r.options.sampling.repetition_penalty == doctest::Approx(1.3));
  CHECK(r.options.sampling.seed == UINT64_MAX);
  CHECK(r.seeded);
  CHECK(r.options.stop == std::vector<std::string>{"\n", "END"});
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.echo);
  CHECK(r.options.ignore_eos);

  CHECK(parse(R"({"prompt": "a", "temperature": 0})").options.sampling.greedy);
  CHECK(parse(R"({"prompt": "a", "repetition_penalty": 1.2})").options.sampling.repetition_penalty ==
        doctest::Approx(1.2));
  CHECK(parse(R"({"prompt": "a", "stop": "x"})").options.stop == std::vector<std::string>{"x"});
  CHECK(parse(R"({"prompt": "a", "max_tokens": null})").options.max_new_tokens == 16);
  CHECK(parse(R"({"prompt": [1, 2, 2147483647]})").prompts[0].ids == std::vector<int32_t>{1, 2, 2147483647});
  CHECK(parse(R"({"prompt": [[5, 6]]})").prompts[0].ids == std::vector<int32_t>{5, 6});
  CHECK(*parse(R"({"prompt": ["one"]})").prompts[0].text == "one");

  // Several prompts, n, logprobs and echo (lm-evaluation-harness's loglikelihood request).
  const CompletionRequest h = parse(R"({"model": "m", "prompt": [[1, 2, 3], [4, 5]], "temperature": 0,
      "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": true})");
  REQUIRE(h.prompts.size() == 2);
  CHECK(h.prompts[1].ids == std::vector<int32_t>{4, 5});
  CHECK(h.logprobs);
  CHECK(h.options.logprobs);
  CHECK(h.options.top_logprobs == 1);
  CHECK(h.options.prompt_logprobs);
  const CompletionRequest texts = parse(R"({"prompt": ["a", "b", "c"], "n": 3, "best_of": 3, "logprobs": 0})");
  CHECK(texts.prompts.size() == 3);
  CHECK(*texts.prompts[2].text == "c");
  CHECK(texts.n == 3);
  CHECK(texts.options.logprobs);
  CHECK(texts.options.top_logprobs == 0);
  CHECK_FALSE(texts.options.prompt_logprobs);  // no echo: the prompt is not scored
  CHECK(parse(R"({"prompt": "a", "logprobs": 20, "max_tokens": 0, "echo": true})").options.max_new_tokens == 0);
}

TEST_CASE("completion request: wrong types and ranges name their field") {
  CHECK(refused_param(R"({"max_tokens": 3})") == "prompt");
  CHECK(refused_param(R"({"prompt": ""})") == "prompt");
  CHECK(refused_param(R"({"prompt": []})") == "prompt");
  CHECK(refused_param(R"({"prompt": 7})") == "prompt");
  CHECK(refused_param(R"({"prompt": [1, "a"]})") == "prompt");
  CHECK(refused_param(R"({"prompt": [1, -2]})") == "prompt");
  CHECK(refused_param(R"({"prompt": [2147483648]})") == "prompt");
  CHECK(refused_param(R"({"prompt": [1.5]})") == "prompt");
  CHECK(refused_param(R"({"prompt": ["a", ""]})") == "prompt");
  CHECK(refused_param(R"({"prompt": [[1], []]})") == "prompt");
  CHECK(refused_param(R"({"prompt": [[1], "a", 3]})") == "prompt");
  CHECK(refused_param(R"({"prompt": [[1], [2, "x"]]})") == "prompt");
  CHECK(refused_param(R"({"prompt": [[1], [[2]]]})") == "prompt");
  std::string many = R"({"prompt": [)";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "\"p\"";
  CHECK(refused_param(many + "]}") == "prompt");
  CHECK(refused_param(R"({"prompt": ["a", "b", "c", "d", "e"], "n": 13})") == "n");
  CHECK(refused_param(R"({"prompt": "a", "n": 0})") == "n");
  CHECK(refused_param(R"({"prompt": "a", "n": 17})") == "n");
  CHECK(refused_param(R"({"prompt": "a", "n": -1})") == "n");
  CHECK(refused_param(R"({"prompt": "a", "logprobs": 21})") == "logprobs");
  CHECK(refused_param(R"({"prompt": "a", "logprobs": true})") == "logprobs");
  CHECK(refused_param(R"({"prompt": "a", "logprobs": -1})") == "logprobs");
  CHECK(refused_param(R"({"prompt": "a", "model": 5})") == "model");
  CHECK(refused_param(R"({"prompt": "a", "max_tokens": -1})") == "max_tokens");
  CHECK(refused_param(R"({"prompt": "a", "max_tokens": 1.0})") == "max_tokens");
  CHECK(refused_param(R"({"prompt": "a", "max_tokens": "3"})") == "max_tokens");
  CHECK(refused_param(R"({"prompt": "a", "max_tokens": 16777217})") == "max_tokens");
  CHECK(refused_param(R"({"prompt": "a", "max_tokens": 1e40})") == "max_tokens");
  CHECK(refused_param(R"({"prompt": "a", "temperature": -1})") == "temperature");
  CHECK(refused_param(R"({"prompt": "a", "temperature": 1e39})") == "temperature");
  CHECK(refused_param(R"({"prompt": "a", "temperature": "0.5"})") == "temperature");
  CHECK(refused_param(R"({"prompt": "a", "top_p": 0})") == "top_p");
  CHECK(refused_param(R"({"prompt": "a", "top_p": 1.01})") == "top_p");
  CHECK(refused_param(R"({"prompt": "a", "top_k": -1})") == "top_k");
  CHECK(refused_param(R"({"prompt": "a", "top_k": 4294967296})") == "top_k");
  CHECK(refused_param(R"({"prompt": "a", "min_p": 1})") == "min_p");
  CHECK(refused_param(R"({"prompt": "a", "min_p": -0.1})") == "min_p");
  CHECK(refused_param(R"({"prompt": "a", "repetition_penalty": 0})") == "repetition_penalty");
  CHECK(refused_param(R"({"prompt": "a", "repeat_penalty": -1})") == "repeat_penalty");
  CHECK(refused_param(R"({"prompt": "a", "seed": -1})") == "seed");
  CHECK(refused_param(R"({"prompt": "a", "seed": 1.5})") == "seed");
  CHECK(refused_param(R"({"prompt": "a", "stop": 1})") == "stop");
  CHECK(refused_param(R"({"prompt": "a", "stop": ["a", 1]})") == "stop");
  CHECK(refused_param(R"({"prompt": "a", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})") == "stop");
  CHECK(refused_param(R"({"prompt": "a", "stream": 1})") == "stream");
  CHECK(refused_param(R"({"prompt": "a", "echo": "no"})") == "echo");
  CHECK(refused_param(R"({"prompt": "a", "ignore_eos": null, "stream_options": 3})") == "stream_options");
  CHECK(refused_param(R"({"prompt": "a", "n": 2, "best_of": 3})") == "best_of");
  CHECK(refused_param(R"({"prompt": "a", "best_of": 3})") == "best_of");
  CHECK(refused_param(R"({"prompt": "a", "suffix": "x"})") == "suffix");
  CHECK(refused_param(R"({"prompt": "a", "frequency_penalty": 0.5})") == "frequency_penalty");
  CHECK(refused_param(R"({"prompt": "a", "logit_bias": {"1": 5}})") == "logit_bias");
}

TEST_CASE("request bodies that are not a JSON object") {
  for (const char* body : {"", "{", "[1]", "\"a\"", "null", "{\"prompt\": NaN}", "{\"prompt\": \"a\"} x",
                           "{\"prompt\": \"\xff\"}"}) {
    CAPTURE(body);
    CHECK(refused_param(body) == "(none)");
  }
  // Nesting deep enough to exhaust a recursive parser's stack is refused early.
  const std::string deep = "{\"prompt\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  CHECK_THROWS_WITH_AS(parse_json_body(deep), doctest::Contains("nested too deeply"), RequestError);
}

TEST_CASE("error bodies are OpenAI's shape, and text that is not UTF-8 is replaced") {
  const json e = json::parse(error_body("bad \xff value", "invalid_request_error", "top_p"));
  CHECK(e["error"]["message"] == "bad \xEF\xBF\xBD value");
  CHECK(e["error"]["type"] == "invalid_request_error");
  CHECK(e["error"]["param"] == "top_p");
  CHECK(e["error"]["code"].is_null());
  CHECK(json::parse(error_body("m", "server_error"))["error"]["param"].is_null());
  CHECK(dump(json{{"text", "\xe4\xb8"}}) == "{\"text\":\"\xEF\xBF\xBD\"}");
}

TEST_CASE("chat request: messages as sent, in their keys' order; the limits and refusals name their field") {
  const auto body = nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "user", "content": "hi", "zeta": 1, "alpha": 2}], "max_completion_tokens": 7,
          "temperature": 0, "chat_template_kwargs": {"enable_thinking": false}, "add_generation_prompt": false})");
  const ChatRequest r = parse_chat_request(body);
  CHECK(r.messages.dump() == R"([{"role":"user","content":"hi","zeta":1,"alpha":2}])");
  REQUIRE(r.max_tokens.has_value());
  CHECK(*r.max_tokens == 7);
  CHECK(r.options.sampling.greedy);
  CHECK_FALSE(r.add_generation_prompt);
  CHECK(r.template_kwargs.dump() == R"({"enable_thinking":false})");
  CHECK_FALSE(parse_chat_request(nlohmann::ordered_json::parse(R"({"messages": [{"role": "user"}]})")).max_tokens);

  auto param_of = [](const char* text) -> std::string {
    try {
      parse_chat_request(nlohmann::ordered_json::parse(text));
    } catch (const RequestError& e) {
      CHECK(e.status == 400);
      return e.param;
    }
    return "accepted";
  };
  CHECK(param_of(R"({})") == "messages");
  CHECK(param_of(R"({"messages": {}})") == "messages");
  CHECK(param_of(R"({"messages": [{"role": 3}]})") == "messages[0].role");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": 5}]})") == "messages[0].content");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})") ==
        "messages[0].content[0].type");
  CHECK(param_of(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})") ==
        "messages[0].content[0].text");
  const char* ok = R"({"role": "user", "content": "x"})";
  auto with = [&](const std::string& extra) { return std::string(R"({"messages": [)") + ok + "], " + extra + "}"; };
  CHECK(param_of(with(R"("tools": [{}])").c_str()) == "tools");
  CHECK(param_of(with(R"("tools": [], "tool_choice": "none", "store": false, "logprobs": false,
                         "response_format": {"type": "text"}, "modalities": ["text"], "service_tier": "auto",
                         "user": "u", "n": 1)")
                     .c_str()) == "accepted");
  CHECK(param_of(with(R"("logprobs": 1)").c_str()) == "logprobs");
  CHECK(param_of(with(R"("top_logprobs": 3)").c_str()) == "top_logprobs");  // needs logprobs: true
  CHECK(param_of(with(R"("logprobs": false, "top_logprobs": 3)").c_str()) == "top_logprobs");
  CHECK(param_of(with(R"("logprobs": true, "top_logprobs": 21)").c_str()) == "top_logprobs");
  CHECK(param_of(with(R"("response_format": {"type": "json_schema"})").c_str()) == "response_format.json_schema");
  CHECK(param_of(with(R"("response_format": {"type": "yaml"})").c_str()) == "response_format.type");
  CHECK(param_of(with(R"("response_format": "json")").c_str()) == "response_format");
  CHECK(param_of(with(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})").c_str()) ==
        "response_format.json_schema.schema");
  CHECK(param_of(with(R"("response_format": {"type": "json_schema", "json_schema": {"schema":
                         {"type": "string", "pattern": "a"}}})").c_str()) == "response_format.json_schema.schema");
  CHECK(param_of(with(R"("grammar": "root ::= [a]", "response_format": {"type": "json_object"})").c_str()) ==
        "grammar");
  CHECK(param_of(with(R"("grammar": 3)").c_str()) == "grammar");
  // Accepted: the grammar of each form, a schema's properties in the order sent.
  const ChatRequest js = parse_chat_request(nlohmann::ordered_json::parse(with(
      R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
         "schema": {"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "string"}},
                    "required": ["zeta", "alpha"], "additionalProperties": false}}})")));
  CHECK(js.constraint.param == "response_format.json_schema.schema");
  CHECK(js.constraint.gbnf.find("zeta") < js.constraint.gbnf.find("alpha"));
  CHECK(parse_chat_request(nlohmann::ordered_json::parse(with(R"("response_format": {"type": "json_object"})")))
            .constraint.gbnf.find("root ::= json-object") == 0);
  CHECK(parse_chat_request(nlohmann::ordered_json::parse(with(R"("response_format": {"type": "text"})")))
            .constraint.gbnf.empty());
  CHECK(parse(R"({"prompt": "a", "grammar": "root ::= [0-9]+"})").constraint.gbnf == "root ::= [0-9]+");
  CHECK(parse(R"({"prompt": "a", "response_format": {"type": "json_object"}})").constraint.param == "response_format");
  CHECK(param_of(with(R"("n": 17)").c_str()) == "n");
  CHECK(param_of(with(R"("n": 0)").c_str()) == "n");
  const ChatRequest lp = parse_chat_request(
      nlohmann::ordered_json::parse(with(R"("logprobs": true, "top_logprobs": 20, "n": 16)")));
  CHECK(lp.logprobs);
  CHECK(lp.options.logprobs);
  CHECK(lp.options.top_logprobs == 20);
  CHECK_FALSE(lp.options.prompt_logprobs);
  CHECK(lp.n == 16);
  CHECK(param_of(with(R"("functions": [])").c_str()) == "functions");
  CHECK(param_of(with(R"("max_tokens": 3, "max_completion_tokens": 4)").c_str()) == "max_tokens");
  CHECK(param_of(with(R"("max_tokens": 3, "max_completion_tokens": 3)").c_str()) == "accepted");
  CHECK(param_of(with(R"("chat_template_kwargs": {"messages": []})").c_str()) == "chat_template_kwargs.messages");
  CHECK(param_of(with(R"("temperature": -1)").c_str()) == "temperature");
}
