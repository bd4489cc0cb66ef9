// mmgpt._mmgpt: the pybind11 module under the mmgpt package (python/mmgpt).
// A thin layer over LanguageModel (engine/mmgpt.hpp): the GIL is released
// while the engine computes, retaken only to run Python callbacks and to
// check for Ctrl-C once a token or window.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <tbb/task_arena.h>

#include "engine/mmgpt.hpp"
#include "formats/error.hpp"
#include "formats/host_tensor.hpp"
#include "formats/pickle_value.hpp"
#include "formats/source_element.hpp"
#include "text/chat_format.hpp"
#include "text/grammar.hpp"
#include "text/json_schema.hpp"
#include "tools/convert/converter.hpp"

namespace py = pybind11;
using namespace mmgpt;

namespace {

// A Python exception (KeyboardInterrupt from Ctrl-C) seen in a callback: the
// engine is stopped through its callback's return value, and this is
// rethrown once the GIL is held again.
struct Interrupted {
  std::optional<py::error_already_set> error;
};

// True while no signal handler raised: PyErr_CheckSignals runs Python's
// handlers (SIGINT -> KeyboardInterrupt). Needs the GIL.
bool no_signal(Interrupted& in) {
  if (PyErr_CheckSignals() == 0) return true;
  in.error.emplace();
  return false;
}

// Runs f with the GIL released, in an arena of `threads` threads (0: all).
template <class F>
auto compute(int threads, F&& f) {
  py::gil_scoped_release release;
  if (threads <= 0) return f();
  tbb::task_arena arena(threads);
  return arena.execute(f);
}

std::vector<int32_t> checked_ids(const LanguageModel& lm, const std::vector<int64_t>& ids, const char* what) {
  const uint64_t vocab = lm.config().vocab_size;
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || static_cast<uint64_t>(id) >= vocab)
      throw Error(std::string(what) + ": token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(vocab - 1) + ")");
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

// A prompt: text (encoded with special tokens allowed, as mmgpt generate -p)
// or a sequence of ids (as --ids).
std::vector<int32_t> prompt_ids(const LanguageModel& lm, const py::object& prompt) {
  if (py::isinstance<py::str>(prompt)) {
    const std::string text = prompt.cast<std::string>();
    if (text.empty()) throw Error("prompt: the prompt is empty");
    return lm.encode(text, true);
  }
  if (py::isinstance<py::bytes>(prompt)) throw Error("prompt: give a str or a list of token ids, not bytes");
  std::vector<int64_t> ids;
  try {
    ids = prompt.cast<std::vector<int64_t>>();
  } catch (const py::cast_error&) {
    throw Error("prompt: give a str or a list of token ids");
  }
  if (ids.empty()) throw Error("prompt: no token ids given");
  return checked_ids(lm, ids, "prompt");
}

// Long prompts run in steps of this many tokens, so that Ctrl-C or close()
// stops a generation within one such step.
constexpr size_t kPrefillChunk = 256;

GenerateOptions generate_options(size_t max_new_tokens, bool greedy, float temperature, uint32_t top_k,
                                 std::optional<float> top_p, std::optional<float> min_p, float repetition_penalty,
                                 std::optional<uint64_t> seed, std::vector<std::string> stop, bool ignore_eos,
                                 std::optional<size_t> logprobs, const std::optional<std::string>& grammar) {
  GenerateOptions o;
  if (grammar) o.grammar = Grammar::parse(*grammar, "grammar");
  if (logprobs) {
    if (*logprobs > kMaxTopLogprobs)
      throw Error("logprobs: at most " + std::to_string(kMaxTopLogprobs) + " alternatives per token, got " +
                  std::to_string(*logprobs));
    o.logprobs = true;
    o.top_logprobs = *logprobs;
  }
  o.max_new_tokens = max_new_tokens;
  o.ignore_eos = ignore_eos;
  o.stop = std::move(stop);
  for (const std::string& s : o.stop)
    if (s.empty()) throw Error("stop: a stop string is empty");
  SamplingOptions& s = o.sampling;
  s.greedy = greedy;
  s.temperature = temperature;
  s.top_k = top_k;
  if (top_p) s.top_p = *top_p;
  if (min_p) s.min_p = *min_p;
  s.repetition_penalty = repetition_penalty;
  s.seed = seed ? *seed : std::random_device{}();
  o.prefill_chunk = kPrefillChunk;
  // The sampler's own checks (one-line errors), before any work.
  Sampler check(s);
  (void)check;
  return o;
}


// [(token, logprob, [(token, logprob), ...]), ...]
py::list logprobs_list(const std::vector<PositionLogprobs>& positions) {
  py::list out;
  for (const PositionLogprobs& p : positions) {
    py::list top;
    for (const TokenLogprob& t : p.top) top.append(py::make_tuple(t.token, t.logprob));
    out.append(py::make_tuple(p.token, p.logprob, top));
  }
  return out;
}

py::dict result_dict(const GenerationResult& r, bool with_logprobs) {
  py::dict d;
  d["tokens"] = r.tokens;
  d["text"] = py::bytes(r.text);
  d["stop_reason"] = stop_reason_name(r.reason);
  d["prompt_tokens"] = r.timings.prompt_tokens;
  if (with_logprobs) d["logprobs"] = logprobs_list(r.logprobs);
  return d;
}

// Generation on its own thread, its text pieces handed to Python one by one
// (stream): next() waits with the GIL released; close() stops the engine at
// its next token and joins.
class TextStream {
 public:
  TextStream(LanguageModel lm, std::vector<int32_t> prompt, GenerateOptions options, int threads)
      : lm_(std::move(lm)), with_logprobs_(options.logprobs) {
    options.interrupt = [this] { return cancel_.load(); };
    worker_ = std::thread([this, prompt = std::move(prompt), options = std::move(options), threads] {
      try {
        auto run = [&] {
          return lm_.generate(prompt, options, [this](const TokenEvent& e) {
            std::lock_guard lock(mu_);
            if (!e.text.empty()) pieces_.emplace_back(e.text);
            cv_.notify_one();
            return true;  // close() stops it through options.interrupt, asked before every step
          });
        };
        GenerationResult r;
        if (threads > 0) {
          tbb::task_arena arena(threads);
          r = arena.execute(run);
        } else {
          r = run();
        }
        std::lock_guard lock(mu_);
        result_ = std::move(r);
      } catch (const std::exception& e) {
        std::lock_guard lock(mu_);
        error_ = e.what();
        is_mmgpt_error_ = dynamic_cast<const Error*>(&e) != nullptr;
      }
      std::lock_guard lock(mu_);
      done_ = true;
      cv_.notify_one();
    });
  }
  ~TextStream() { close(); }

  // The next piece of text (bytes), or None at the end. Waits with the GIL
  // released, taking it back every 100 ms to run Python's signal handlers
  // (Ctrl-C raises KeyboardInterrupt here even before the first token).
  py::object next() {
    std::string piece;
    for (bool ready = false; !ready;) {
      {
        py::gil_scoped_release release;
        std::unique_lock lock(mu_);
        ready = cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return !pieces_.empty() || done_; });
        if (!pieces_.empty()) {
          piece = std::move(pieces_.front());
          pieces_.pop_front();
        }
      }
      if (!ready && PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    if (!piece.empty()) return py::bytes(piece);
    if (!error_.empty()) {
      const std::string e = std::move(error_);
      error_.clear();
      if (is_mmgpt_error_) throw Error(e);
      throw std::runtime_error(e);
    }
    return py::none();
  }

  // The whole result (as generate() returns it) once generation has ended, else None.
  py::object result() {
    std::lock_guard lock(mu_);
    if (!done_ || !result_) return py::none();
    return result_dict(*result_, with_logprobs_);
  }

  void close() {
    cancel_ = true;
    if (worker_.joinable()) {
      py::gil_scoped_release release;
      worker_.join();
    }
  }

 private:
  LanguageModel lm_;
  bool with_logprobs_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> pieces_;
  std::optional<GenerationResult> result_;
  std::string error_;
  bool is_mmgpt_error_ = false;
  bool done_ = false;
  std::atomic<bool> cancel_{false};
};

// A checkpoint in memory (what torch.load returns, a state dict, ...) as the
// pickle values the converter reads from files: dicts, lists, scalars and
// strings as they are; torch tensors and numpy arrays as tensors read in
// place, a row range at a time (only a non-contiguous or non-CPU tensor is
// copied first); any other object as None, since it holds no weights. The
// arrays read are kept alive in `keep`, released with the GIL held.
class InMemory {
 public:
  InMemory() {
    py::dict modules = py::module_::import("sys").attr("modules");
    if (modules.contains("torch")) {
      torch_ = modules["torch"];
      tensor_type_ = torch_.attr("Tensor");
    }
  }

  pickle::ValuePtr value(const py::handle& obj, int depth = 0) {
    if (depth > 64) throw Error("convert: the checkpoint object is nested too deeply");
    auto v = std::make_shared<pickle::Value>();
    using K = pickle::Value::Kind;
    if (obj.is_none()) return v;
    if (py::isinstance<py::bool_>(obj)) {
      v->kind = K::Bool;
      v->boolean = obj.cast<bool>();
    } else if (py::isinstance<py::int_>(obj)) {
      v->kind = K::Int;
      try {
        v->integer = obj.cast<int64_t>();
      } catch (const py::cast_error&) {
        v->kind = K::None;  // beyond 64 bits: no size field is
      }
    } else if (py::isinstance<py::float_>(obj)) {
      v->kind = K::Float;
      v->real = obj.cast<double>();
    } else if (py::isinstance<py::str>(obj)) {
      v->kind = K::String;
      v->text = obj.cast<std::string>();
    } else if (py::isinstance<py::bytes>(obj)) {
      v->kind = K::Bytes;
      v->text = obj.cast<std::string>();
    } else if (py::isinstance<py::dict>(obj) || (py::hasattr(obj, "keys") && py::hasattr(obj, "__getitem__"))) {
      v->kind = K::Dict;  // dict, OrderedDict (state_dict()), any mapping
      for (const py::handle key : obj.attr("keys")()) v->entries.emplace_back(value(key, depth + 1), value(obj[key], depth + 1));
    } else if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
      v->kind = py::isinstance<py::list>(obj) ? K::List : K::Tuple;
      for (const py::handle item : obj) v->items.push_back(value(item, depth + 1));
    } else if (tensor_type_ && py::isinstance(obj, tensor_type_)) {
      py::object t = obj.attr("detach")().attr("cpu")().attr("contiguous")();
      std::string dtype = py::str(t.attr("dtype")).cast<std::string>();
      if (dtype.rfind("torch.", 0) == 0) dtype = dtype.substr(6);
      // numpy has no bfloat16: its bits, as int16
      py::object array = dtype == "bfloat16" ? t.attr("view")(torch_.attr("int16")).attr("numpy")() : t.attr("numpy")();
      tensor(*v, array, dtype);
    } else if (py::isinstance<py::array>(obj)) {
      py::object array = py::module_::import("numpy").attr("ascontiguousarray")(obj);
      tensor(*v, array, py::str(array.attr("dtype").attr("name")).cast<std::string>());
    }
    return v;
  }

  // (The arrays in keep_ are released with the InMemory, which needs the GIL.)

 private:
  void tensor(pickle::Value& v, const py::object& array_obj, const std::string& dtype) {
    const SourceElementInfo* e = source_element_by_torch_name(dtype);
    if (!e) throw Error("convert: a tensor of dtype " + dtype + " cannot be read (floating point, integer or bool)");
    const py::array array = py::reinterpret_borrow<py::array>(array_obj);
    auto t = std::make_shared<HostTensor>();
    for (py::ssize_t d = 0; d < array.ndim(); ++d) t->shape.push_back(static_cast<uint64_t>(array.shape(d)));
    t->source_dtype = dtype;
    const auto* bytes = static_cast<const uint8_t*>(array.data());
    const uint64_t row = t->row_size(), size = e->size;
    const SourceElement element = e->element;
    t->reader = [bytes, row, size, element](uint64_t first, uint64_t count, float* out) {
      widen_to_f32(bytes + first * row * size, count * row, element, out);
    };
    keep_.push_back(array_obj);
    v.kind = pickle::Value::Kind::Tensor;
    v.tensor = std::move(t);
  }

  py::object torch_, tensor_type_;
  std::vector<py::object> keep_;
};

}  // namespace

PYBIND11_MODULE(_mmgpt, m) {
  m.doc() = "mmgpt's native module; use the mmgpt package, which wraps it.";

  // mmgpt::Error -> mmgpt.Error, a ValueError carrying the one-line message.
  py::register_exception<Error>(m, "Error", PyExc_ValueError);

  py::class_<ModelConfig>(m, "Config", "A model's shape, as stored in its .mmgpt file.")
      .def_readonly("n_layer", &ModelConfig::n_layer, "transformer blocks")
      .def_readonly("n_head", &ModelConfig::n_head, "attention heads")
      .def_readonly("n_embd", &ModelConfig::n_embd, "model width")
      .def_readonly("vocab_size", &ModelConfig::vocab_size, "rows of the embedding and of the LM head")
      .def_readonly("n_ctx", &ModelConfig::n_ctx, "context length in tokens")
      .def_readonly("n_ff", &ModelConfig::n_ff, "MLP hidden width")
      .def_property_readonly(
          "n_kv_head", [](const ModelConfig& c) { return c.kv_heads(); }, "key/value heads (grouped-query attention)")
      .def_property_readonly(
          "head_dim", [](const ModelConfig& c) { return c.head_size(); }, "features of one attention head")
      .def("__repr__", [](const ModelConfig& c) {
        return "Config(n_layer=" + std::to_string(c.n_layer) + ", n_head=" + std::to_string(c.n_head) +
               ", n_embd=" + std::to_string(c.n_embd) + ", vocab_size=" + std::to_string(c.vocab_size) +
               ", n_ctx=" + std::to_string(c.n_ctx) + ", n_ff=" + std::to_string(c.n_ff) +
               ", n_kv_head=" + std::to_string(c.kv_heads()) + ", head_dim=" + std::to_string(c.head_size()) + ")";
      });

  py::class_<LanguageModel>(m, "Model")
      .def_static(
          "load",
          [](const std::string& path) {
            py::gil_scoped_release release;
            return LanguageModel::load(path);
          },
          py::arg("path"))
      .def_property_readonly("config", &LanguageModel::config, py::return_value_policy::copy)
      .def(
          "encode",
          [](const LanguageModel& lm, const std::string& text, bool allow_special) {
            return lm.encode(text, allow_special);
          },
          py::arg("text"), py::arg("allow_special") = true)
      .def(
          "render_chat",
          [](const LanguageModel& lm, const std::string& variables_json, bool add_generation_prompt,
             std::optional<std::string> template_text) {
            // The variables come from Python's json.dumps, in the caller's key order.
            const auto variables = nlohmann::ordered_json::parse(variables_json, nullptr, false);
            if (variables.is_discarded()) throw Error("chat: the messages are not JSON");
            if (template_text) return ChatFormat::from_text(*template_text, "chat_template").render(variables, add_generation_prompt);
            if (lm.tokenizer().chat_json().empty())
              throw Error("the model's tokenizer has no chat template (give one with chat_template=)");
            return ChatFormat::from_tokenizer(lm.tokenizer().chat_json(), "the model")
                .render(variables, add_generation_prompt);
          },
          py::arg("variables_json"), py::arg("add_generation_prompt"), py::arg("template_text"))
      .def(
          "decode_bytes",
          [](const LanguageModel& lm, const std::vector<int64_t>& ids) {
            if (lm.tokenizer().kind() == TokenizerKind::None) throw Error("the model has no tokenizer to decode with");
            return py::bytes(lm.decode(checked_ids(lm, ids, "decode")));
          },
          py::arg("ids"))
      .def(
          "logits",
          [](const LanguageModel& lm, const std::vector<int64_t>& ids, int threads) {
            const std::vector<int32_t> in = checked_ids(lm, ids, "logits");
            if (in.empty()) throw Error("logits: no token ids given");
            auto* out = new std::vector<float>(compute(threads, [&] { return lm.logits(in); }));
            py::capsule owner(out, [](void* p) { delete static_cast<std::vector<float>*>(p); });
            const py::ssize_t rows = static_cast<py::ssize_t>(in.size());
            const py::ssize_t cols = static_cast<py::ssize_t>(lm.config().vocab_size);
            return py::array_t<float>({rows, cols}, {cols * py::ssize_t(sizeof(float)), py::ssize_t(sizeof(float))},
                                      out->data(), owner);
          },
          py::arg("ids"), py::arg("threads") = 0)
      .def(
          "generate_batch",
          [](const LanguageModel& lm, const std::vector<py::object>& prompts, size_t max_new_tokens, bool greedy,
             float temperature, uint32_t top_k, std::optional<float> top_p, std::optional<float> min_p,
             float repetition_penalty, std::optional<uint64_t> seed, std::vector<std::string> stop, bool ignore_eos,
             int threads, std::optional<size_t> logprobs, std::optional<std::string> grammar) {
            if (prompts.empty()) throw Error("prompts: no prompt given");
            std::vector<std::vector<int32_t>> ids;
            for (const py::object& p : prompts) ids.push_back(prompt_ids(lm, p));
            GenerateOptions o = generate_options(max_new_tokens, greedy, temperature, top_k, top_p, min_p,
                                                 repetition_penalty, seed, std::move(stop), ignore_eos, logprobs,
                                                 grammar);
            Interrupted in;
            // Asked on the calling thread before each step; Ctrl-C: Python's signal handlers run here.
            o.interrupt = [&] {
              py::gil_scoped_acquire gil;
              return !no_signal(in);
            };
            std::vector<GenerationResult> results = compute(threads, [&] { return lm.generate_batch(ids, o); });
            if (in.error) throw *in.error;
            py::list out;
            for (const GenerationResult& r : results) out.append(result_dict(r, o.logprobs));
            return out;
          },
          py::arg("prompts"), py::arg("max_new_tokens"), py::arg("greedy"), py::arg("temperature"), py::arg("top_k"),
          py::arg("top_p"), py::arg("min_p"), py::arg("repetition_penalty"), py::arg("seed"), py::arg("stop"),
          py::arg("ignore_eos"), py::arg("threads"), py::arg("logprobs") = py::none(),
          py::arg("grammar") = py::none())
      .def(
          "stream",
          [](const LanguageModel& lm, const py::object& prompt, size_t max_new_tokens, bool greedy, float temperature,
             uint32_t top_k, std::optional<float> top_p, std::optional<float> min_p, float repetition_penalty,
             std::optional<uint64_t> seed, std::vector<std::string> stop, bool ignore_eos, int threads,
             std::optional<size_t> logprobs, std::optional<std::string> grammar) {
            std::vector<int32_t> ids = prompt_ids(lm, prompt);
            GenerateOptions o = generate_options(max_new_tokens, greedy, temperature, top_k, top_p, min_p,
                                                 repetition_penalty, seed, std::move(stop), ignore_eos, logprobs,
                                                 grammar);
            return std::make_unique<TextStream>(lm, std::move(ids), std::move(o), threads);
          },
          py::arg("prompt"), py::arg("max_new_tokens"), py::arg("greedy"), py::arg("temperature"), py::arg("top_k"),
          py::arg("top_p"), py::arg("min_p"), py::arg("repetition_penalty"), py::arg("seed"), py::arg("stop"),
          py::arg("ignore_eos"), py::arg("threads"), py::arg("logprobs") = py::none(),
          py::arg("grammar") = py::none())
      .def(
          "score",
          [](const LanguageModel& lm, const std::vector<int64_t>& context, const std::vector<int64_t>& continuation,
             size_t top_logprobs, int threads) {
            std::vector<int32_t> ctx = checked_ids(lm, context, "context");
            const std::vector<int32_t> cont = checked_ids(lm, continuation, "continuation");
            if (ctx.empty()) {  // as lm-evaluation-harness: the BOS the tokenizer adds, else the end-of-text token
              ctx = lm.encode("", true, true);
              if (ctx.empty() && lm.tokenizer().eos_id() >= 0) ctx = {static_cast<int32_t>(lm.tokenizer().eos_id())};
              if (ctx.empty()) throw Error("context: empty, and the model has no BOS or end-of-text token to start from");
            }
            const ScoreResult r = compute(threads, [&] { return lm.score(ctx, cont, top_logprobs); });
            py::dict d;
            d["logprob"] = r.logprob;
            d["greedy"] = r.greedy;
            d["logprobs"] = logprobs_list(r.tokens);
            return d;
          },
          py::arg("context"), py::arg("continuation"), py::arg("top_logprobs"), py::arg("threads"))
      .def(
          "perplexity",
          [](const LanguageModel& lm, const py::object& text_or_ids, std::optional<size_t> ctx,
             std::optional<size_t> stride, int threads, size_t window_begin, size_t window_end) {
            std::vector<int32_t> tokens;
            if (py::isinstance<py::str>(text_or_ids))
              tokens = lm.encode(text_or_ids.cast<std::string>(), true);
            else
              tokens = checked_ids(lm, text_or_ids.cast<std::vector<int64_t>>(), "perplexity");
            PerplexityOptions o;
            o.window_begin = window_begin;
            o.window_end = window_end;
            if (ctx) {
              if (*ctx == 0) throw Error("ctx: must be at least 2 tokens");
              o.ctx = *ctx;
            }
            if (stride) {
              if (*stride == 0) throw Error("stride: must be at least 1 token");
              o.stride = *stride;
            }
            Interrupted in;
            const PerplexityResult r = compute(threads, [&] {
              return lm.perplexity(tokens, o, [&](size_t, size_t) {
                py::gil_scoped_acquire gil;
                return no_signal(in);
              });
            });
            if (in.error) throw *in.error;
            py::dict d;
            d["perplexity"] = r.perplexity;
            d["mean_nll"] = r.mean_nll;
            d["tokens"] = r.tokens;
            d["windows"] = r.windows;
            d["ctx"] = r.ctx;
            d["stride"] = r.stride;
            d["seconds"] = r.seconds;
            d["nll_sum"] = r.nll_sum;
            d["windows_planned"] = r.windows_planned;
            return d;
          },
          py::arg("text_or_ids"), py::arg("ctx"), py::arg("stride"), py::arg("threads"), py::arg("window_begin") = 0,
          py::arg("window_end") = SIZE_MAX);

  m.def("_set_data_dir", &set_bundled_data_dir, py::arg("dir"));
  m.def(
      "json_schema_grammar",
      [](const std::string& schema_json) { return json_schema_grammar(schema_json, "response_format's schema"); },
      py::arg("schema_json"));
  m.def("json_object_grammar", &json_object_grammar);
  // convert(src, ...) for a path; convert_object for a checkpoint in memory.
  auto options = [](std::string out, std::string layout, int n_head, std::string dtype, std::string dtype_head,
                    std::string tokenizer) {
    ConvertOptions o;
    o.output = std::move(out);
    o.layout = std::move(layout);
    o.n_head = n_head;
    o.dtype = std::move(dtype);
    o.dtype_head = std::move(dtype_head);
    o.tokenizer = std::move(tokenizer);
    return o;
  };
  m.def(
      "convert",
      [options](std::string src, std::string out, std::string layout, int n_head, std::string dtype,
                std::string dtype_head, std::string tokenizer) {
        ConvertOptions o = options(std::move(out), std::move(layout), n_head, std::move(dtype), std::move(dtype_head),
                                   std::move(tokenizer));
        o.input = std::move(src);
        py::gil_scoped_release release;
        convert_checkpoint(o);
      },
      py::arg("src"), py::arg("out"), py::arg("layout"), py::arg("n_head"), py::arg("dtype"), py::arg("dtype_head"),
      py::arg("tokenizer"));
  m.def(
      "convert_object",
      [options](const py::object& src, std::string out, std::string layout, int n_head, std::string dtype,
                std::string dtype_head, std::string tokenizer, std::string config_json) {
        ConvertOptions o = options(std::move(out), std::move(layout), n_head, std::move(dtype), std::move(dtype_head),
                                   std::move(tokenizer));
        o.config_json = std::move(config_json);
        InMemory in;
        const pickle::ValuePtr root = in.value(src);
        py::gil_scoped_release release;
        convert_in_memory(*root, "in-memory checkpoint", o);
      },
      py::arg("src"), py::arg("out"), py::arg("layout"), py::arg("n_head"), py::arg("dtype"), py::arg("dtype_head"),
      py::arg("tokenizer"), py::arg("config_json") = "");

  py::class_<TextStream>(m, "TextStream")
      .def("next", &TextStream::next)
      .def("result", &TextStream::result)
      .def("close", &TextStream::close);
}
