// nanoGPT (karpathy/nanoGPT model.py): GPT-2 names under "transformer.",
// nn.Linear matrices [out, in], lm_head tied to wte, the exact erf GELU,
// optional biases (bias=False drops Linear and LayerNorm biases), and the
// hyper-parameters in the checkpoint's 'model_args' dict beside 'model'.
#include "formats/error.hpp"
#include "tools/convert/layout_gpt2_common.hpp"

namespace mmgpt::convert {

namespace {

// model_args[key] as a positive 32-bit integer, or 0 when absent / None.
uint32_t arg_u32(const pickle::Value& args, const char* key, const std::string& file) {
  const pickle::Value* v = args.get(key);
  if (!v || v->kind == pickle::Value::Kind::None) return 0;
  if (!v->is_int() || v->integer <= 0 || v->integer > int64_t(UINT32_MAX))
    throw Error(file + ": model_args['" + key + "'] is not a positive integer");
  return uint32_t(v->integer);
}

void check_arg(const std::string& file, const char* key, uint32_t stated, uint32_t actual, const char* what) {
  if (stated && stated != actual)
    throw Error(file + ": model_args['" + key + "'] is " + std::to_string(stated) + " but the tensors have " + what +
                " " + std::to_string(actual));
}

}  // namespace

MappedModel map_nanogpt(const LayoutInput& in) {
  TensorTaker taker(*in.weights, in.file, "nanogpt");
  Gpt2Naming naming;
  naming.prefix = "transformer.";
  naming.conv1d = false;
  const Gpt2Shapes shapes = read_gpt2_shapes(taker, *in.weights, naming);

  MappedModel out;
  ModelConfig& c = out.config;
  shapes.apply_to(c);
  c.norm_eps = 1e-5f;      // nanoGPT's LayerNorm uses F.layer_norm's default
  c.gelu = GeluKind::Erf;  // nn.GELU() without approximate='tanh'

  bool bias = in.weights->has("transformer.h.0.attn.c_attn.bias");
  const pickle::Value* args = in.root ? in.root->get("model_args") : nullptr;
  if (args && args->is_dict()) {
    check_arg(in.file, "n_layer", arg_u32(*args, "n_layer", in.file), shapes.n_layer, "layers:");
    check_arg(in.file, "n_embd", arg_u32(*args, "n_embd", in.file), shapes.n_embd, "width");
    check_arg(in.file, "block_size", arg_u32(*args, "block_size", in.file), shapes.n_ctx, "position rows");
    check_arg(in.file, "vocab_size", arg_u32(*args, "vocab_size", in.file), shapes.vocab, "vocabulary rows");
    c.n_head = arg_u32(*args, "n_head", in.file);
    if (!c.n_head) c.n_head = in.n_head;
    if (in.n_head && in.n_head != c.n_head)
      throw Error(in.file + ": model_args['n_head'] is " + std::to_string(c.n_head) + " but --n-head says " +
                  std::to_string(in.n_head));
    if (const pickle::Value* b = args->get("bias")) {
      if (b->kind != pickle::Value::Kind::Bool) throw Error(in.file + ": model_args['bias'] is not True or False");
      bias = b->boolean;  // the tensors must then agree: missing or extra biases are refused below
    }
  } else {
    c.n_head = in.n_head;
    out.notes.push_back("no model_args in the checkpoint: sizes read from the tensors" +
                        std::string(in.n_head ? ", n_head from --n-head" : ""));
  }
  c.qkv_bias = c.linear_bias = c.norm_bias = bias;

  map_gpt2_tensors(taker, naming, out);
  if (!c.n_head) throw Error(in.file + ": the head count is unknown (no model_args['n_head']): give --n-head");
  return out;
}

}  // namespace mmgpt::convert
