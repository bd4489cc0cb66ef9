// nanochat (github:karpathy/nanochat, nanochat/gpt.py at commit 92d63d4e8bb4,
// the newest that touches it; docs/architecture.md, "nanochat"): a checkpoint directory of
// model_<step>.pt (the state dict) and meta_<step>.json (its "model_config":
// sequence_len, vocab_size, n_layer, n_head, n_kv_head, n_embd,
// window_pattern), as checkpoint_manager.save_checkpoint writes them.
//
// Its GPT, as config fields (model_config.hpp): a parameter-free RMS norm
// (eps: float32's epsilon, what F.rms_norm uses for fp32 / bf16) after the
// embedding and before each sublayer; the smear of the previous token's
// embedding (smear_gate on the first 24 channels, smear_lambda); per-layer
// residual mixing with the embedding (resid_lambdas, x0_lambdas); rotary
// positions over whole heads with base 100000, split halves, rotated by
// -angle; a plain QK-norm after the rotation, times 1.2; value embeddings on
// alternate layers (the last included) with a 3 * sigmoid gate per KV head on
// the first 12 channels; sliding windows per layer from window_pattern; a
// ReLU^2 MLP of 4 * n_embd; the backout of the residual after layer
// n_layer / 2; an untied head over a vocabulary padded to a multiple of 64
// (the padding rows are dropped: nanochat slices its logits to vocab_size);
// the logits capped at 15 * tanh(x / 15). No biases anywhere.
#include <cfloat>
#include <filesystem>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "tools/convert/json_fields.hpp"
#include "tools/convert/layout.hpp"
#include "tools/convert/tensor_ops.hpp"

namespace mmgpt::convert {

namespace {

using nlohmann::json;

// Constants of nanochat/gpt.py.
constexpr uint32_t kPadVocabTo = 64;
constexpr double kRopeBase = 100000.0;
constexpr float kQkScale = 1.2f;
constexpr uint32_t kVeGateChannels = 12;
constexpr float kVeGateRange = 3.0f;
constexpr uint32_t kSmearChannels = 24;
constexpr float kSoftcap = 15.0f;
constexpr uint32_t kMlpRatio = 4;

const std::set<std::string> kConfigKeys = {"sequence_len", "vocab_size", "n_layer",       "n_head",
                                           "n_kv_head",    "n_embd",     "window_pattern"};

// meta_<step>.json beside model_<step>.pt.
std::string meta_path_for(const std::string& file) {
  const std::filesystem::path p(file);
  const std::string name = p.filename().string();
  if (name.rfind("model_", 0) != 0 || p.extension() != ".pt")
    throw Error(file + ": a nanochat checkpoint is named model_<step>.pt (its meta_<step>.json beside it)");
  return (p.parent_path() / ("meta_" + p.stem().string().substr(6) + ".json")).string();
}

// A tensor of `shape` read from t's values (small ones: gates and scalars).
TensorPtr reshaped(const TensorPtr& t, std::vector<uint64_t> shape) {
  auto h = std::make_shared<HostTensor>();
  h->shape = std::move(shape);
  h->data = t->values();
  h->source_dtype = t->source_dtype;
  return h;
}

TensorPtr filled(uint64_t n, float value) {
  auto h = std::make_shared<HostTensor>();
  h->shape = {n};
  h->data.assign(n, value);
  h->source_dtype = "float32";
  return h;
}

}  // namespace

std::vector<uint32_t> nanochat_windows(const std::string& pattern, uint32_t sequence_len, uint32_t n_layer,
                                       const std::string& where) {
  std::string p;
  for (char ch : pattern) p += static_cast<char>(ch >= 'a' && ch <= 'z' ? ch - 'a' + 'A' : ch);
  if (p.empty() || p.find_first_not_of("SL") != std::string::npos)
    throw Error(where + ": window_pattern \"" + pattern + "\" must be letters S and L (short and long windows)");
  // GPT._compute_window_sizes: FA3's window_size (left, 0), a query sees
  // positions i - left .. i; short = ceil(ceil(L / 4) / 128) * 128, the last layer long.
  const uint64_t long_left = sequence_len, short_left = (uint64_t{sequence_len} + 3) / 4;
  const uint64_t short_rounded = (short_left + 127) / 128 * 128;
  std::vector<uint32_t> windows(n_layer);
  for (uint32_t i = 0; i < n_layer; ++i) {
    const uint64_t left = (i + 1 == n_layer || p[i % p.size()] == 'L') ? long_left : short_rounded;
    // left + 1 positions, itself included; the context holds sequence_len, so
    // a window that covers it is no window.
    windows[i] = left + 1 >= sequence_len ? 0 : static_cast<uint32_t>(left + 1);
  }
  return windows;
}

MappedModel map_nanochat(const LayoutInput& in) {
  std::string text, path;
  if (!in.config_text.empty()) {
    text = in.config_text;
    path = in.file + ": config";
  } else if (in.directory.empty()) {
    throw Error(in.file +
                ": a nanochat state dict in memory needs its model_config (config=: the meta dict, its "
                "model_config, or the GPTConfig)");
  } else {
    path = meta_path_for(in.file);
    if (!is_file(path))
      throw Error(in.file + ": nanochat's " + std::filesystem::path(path).filename().string() +
                  " (its model_config) is missing beside it");
    text = read_small_file(path, 16 << 20);
  }
  const json meta = parse_json_object(text, path);
  // meta_<step>.json holds model_config; a config given in memory may be either.
  const json& j = meta.contains("model_config") ? meta["model_config"] : meta;
  if (!j.is_object()) throw Error(path + ": model_config is not an object");
  for (const auto& item : j.items())
    if (!kConfigKeys.count(item.key()))
      throw Error(path + ": model_config key '" + item.key() +
                  "' is not one of nanochat's GPTConfig fields (sequence_len, vocab_size, n_layer, n_head, n_kv_head, "
                  "n_embd, window_pattern)");

  MappedModel out;
  ModelConfig& c = out.config;
  std::string pattern = "L";  // checkpoint_manager's default for checkpoints older than window_pattern
  try {
    c.n_ctx = json_u32(j, "sequence_len", path);
    c.vocab_size = json_u32(j, "vocab_size", path);
    c.n_layer = json_u32(j, "n_layer", path);
    c.n_head = json_u32(j, "n_head", path);
    c.n_kv_head = json_u32(j, "n_kv_head", path);
    c.n_embd = json_u32(j, "n_embd", path);
    if (j.contains("window_pattern")) {
      if (!j["window_pattern"].is_string())
        throw Error(path + ": window_pattern is " + j["window_pattern"].dump() + ", expected a string");
      pattern = j["window_pattern"].get<std::string>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": " + e.what());
  }
  if (in.n_head && in.n_head != c.n_head)
    throw Error(path + ": n_head is " + std::to_string(c.n_head) + " but --n-head says " + std::to_string(in.n_head));
  if (c.n_embd % c.n_head != 0)
    throw Error(path + ": n_embd " + std::to_string(c.n_embd) + " is not a multiple of n_head " +
                std::to_string(c.n_head));
  if (c.n_kv_head > c.n_head || c.n_head % c.n_kv_head != 0)
    throw Error(path + ": n_head " + std::to_string(c.n_head) + " is not a multiple of n_kv_head " +
                std::to_string(c.n_kv_head));
  if (c.n_embd < kSmearChannels)
    throw Error(path + ": n_embd " + std::to_string(c.n_embd) + " is below the smear gate's " +
                std::to_string(kSmearChannels) + " channels");
  c.n_ff = kMlpRatio * c.n_embd;
  c.head_dim = c.n_embd / c.n_head;
  c.norm = NormKind::RmsNorm;
  c.norm_weight = false;
  c.norm_bias = false;
  c.norm_eps = FLT_EPSILON;
  c.qkv_bias = c.linear_bias = false;
  c.mlp_bias = false;
  c.tied_lm_head = false;
  c.gelu = GeluKind::ReluSquared;
  c.pos_embedding = PosEmbedding::Rotary;
  c.rope_dims = c.head_dim;
  c.rope_inverse = true;
  c.rope_theta = kRopeBase;
  c.qk_norm = QkNorm::Plain;
  c.qk_norm_after_rope = true;
  c.qk_norm_scale = kQkScale;
  c.logit_softcap = kSoftcap;
  c.embed_norm = true;
  c.smear_channels = kSmearChannels;
  c.resid_mix = true;
  c.backout_after = c.n_layer / 2 + 1;
  if (c.n_layer <= 4096) {  // validate_config names a larger one
    c.attn_window = nanochat_windows(pattern, c.n_ctx, c.n_layer, path);
    c.value_embed.assign(c.n_layer, 0);
    for (uint32_t i = 0; i < c.n_layer; ++i) c.value_embed[i] = i % 2 == (c.n_layer - 1) % 2;  // has_ve
    c.ve_gate_channels = kVeGateChannels;
    c.ve_gate_range = kVeGateRange;
  }
  if (c.head_dim < 2 || c.head_dim % 2 != 0)
    throw Error(path + ": head size n_embd / n_head = " + std::to_string(c.head_dim) + " is not even");
  validate_config(c, path);

  TensorTaker taker(*in.weights, in.file, "nanochat");
  const uint64_t d = c.n_embd, v = c.vocab_size, ff = c.n_ff, q = c.q_width(), kv = c.kv_width();
  const uint64_t padded = (v + kPadVocabTo - 1) / kPadVocabTo * kPadVocabTo;
  std::vector<std::string> needed = {"transformer.wte.weight", "lm_head.weight", "smear_gate.weight", "smear_lambda",
                                     "backout_lambda"};
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    for (const char* name :
         {"attn.c_q.weight", "attn.c_k.weight", "attn.c_v.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
          "mlp.c_proj.weight"})
      needed.push_back(p + name);
    if (c.has_value_embed(i)) {
      needed.push_back(p + "attn.ve_gate.weight");
      needed.push_back("value_embeds." + std::to_string(i) + ".weight");
    }
  }
  taker.require(needed);
  const uint32_t layers = count_layers(*in.weights, "transformer.h.", in.file);
  if (layers != c.n_layer)
    throw Error(in.file + ": has " + std::to_string(layers) + " blocks but " + path + " says n_layer " +
                std::to_string(c.n_layer));

  // The embedding, the head and the value embeddings have the padded vocabulary's rows.
  const uint64_t rows = taker.peek("transformer.wte.weight").rows();
  if (rows != padded && rows != v)
    throw Error(in.file + ": tensor 'transformer.wte.weight' has " + std::to_string(rows) + " rows, not vocab_size " +
                std::to_string(v) + " padded to a multiple of 64 (" + std::to_string(padded) + ")");
  auto vocab_rows = [&](const std::string& name, uint64_t width) {
    TensorPtr t = taker.take(name, {rows, width});
    return rows == v ? t : slice_rows(t, 0, v);
  };

  out.tensors.emplace_back("wte", vocab_rows("transformer.wte.weight", d));
  out.tensors.emplace_back("smear.gate.weight", reshaped(taker.take("smear_gate.weight", {1, kSmearChannels}),
                                                         {kSmearChannels}));
  out.tensors.emplace_back("smear.lambda", taker.take("smear_lambda", {1}));
  // checkpoint_manager patches checkpoints saved before these existed: ones and zeros.
  const bool old_mix = !taker.has("resid_lambdas") && !taker.has("x0_lambdas");
  out.tensors.emplace_back("resid_lambdas", old_mix ? filled(c.n_layer, 1.0f) : taker.take("resid_lambdas", {c.n_layer}));
  out.tensors.emplace_back("x0_lambdas", old_mix ? filled(c.n_layer, 0.0f) : taker.take("x0_lambdas", {c.n_layer}));
  if (old_mix) out.notes.push_back("no resid_lambdas / x0_lambdas: ones and zeros, as nanochat's loader patches them");
  out.tensors.emplace_back("backout_lambda", taker.take("backout_lambda", {1}));
  for (uint32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".", h = "h." + std::to_string(i) + ".";
    out.tensors.emplace_back(h + "attn.qkv.weight", concat_rows({taker.take(p + "attn.c_q.weight", {q, d}),
                                                                 taker.take(p + "attn.c_k.weight", {kv, d}),
                                                                 taker.take(p + "attn.c_v.weight", {kv, d})}));
    if (c.has_value_embed(i)) {
      out.tensors.emplace_back(h + "attn.ve.weight", vocab_rows("value_embeds." + std::to_string(i) + ".weight", kv));
      out.tensors.emplace_back(h + "attn.ve_gate.weight",
                               taker.take(p + "attn.ve_gate.weight", {c.kv_heads(), kVeGateChannels}));
    }
    out.tensors.emplace_back(h + "attn.proj.weight", taker.take(p + "attn.c_proj.weight", {d, q}));
    out.tensors.emplace_back(h + "mlp.fc.weight", taker.take(p + "mlp.c_fc.weight", {ff, d}));
    out.tensors.emplace_back(h + "mlp.proj.weight", taker.take(p + "mlp.c_proj.weight", {d, ff}));
  }
  out.tensors.emplace_back("lm_head.weight", vocab_rows("lm_head.weight", d));
  taker.finish();

  std::string windows;
  for (uint32_t i = 0; i < c.n_layer; ++i) windows += (i ? "," : "") + std::to_string(c.window_of(i));
  out.notes.push_back("nanochat GPT: " + std::to_string(c.n_layer) + " layers, " + std::to_string(c.n_head) +
                      " heads (" + std::to_string(c.kv_heads()) + " key/value) of " + std::to_string(c.head_size()) +
                      ", window_pattern " + pattern + " (attention windows " + windows + "; 0: the whole context of " +
                      std::to_string(c.n_ctx) + ")" +
                      (rows != v ? ", vocabulary rows " + std::to_string(rows) + " -> " + std::to_string(v) : ""));
  return out;
}

}  // namespace mmgpt::convert
