// mmgpt convert: PyTorch checkpoint (+ tokenizer files) -> one .mmgpt file.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/weight_type.hpp"
#include "formats/error.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/validate.hpp"
#include "tools/convert/converter.hpp"

namespace mmgpt::cli {

namespace {

const char* tokenizer_kind_name(TokenizerKind k) {
  switch (k) {
    case TokenizerKind::None: return "none";
    case TokenizerKind::Char: return "character-level";
    case TokenizerKind::Gpt2Bpe: return "GPT-2 BPE";
    case TokenizerKind::Bpe: return "BPE (tokenizer.json or tiktoken)";
  }
  return "?";
}

// Every weight type's name, as --dtype takes them.
std::vector<std::string> dtype_names() {
  std::vector<std::string> names;
  for (uint32_t id = 0; const WeightTypeInfo* t = weight_type_by_id(id); ++id) names.emplace_back(t->name);
  return names;
}

// "f32 (32), bf16 (16), ..., q4_0 (4.5)": each weight type and its bits per weight.
std::string dtype_choices() {
  std::string s;
  for (uint32_t id = 0; const WeightTypeInfo* t = weight_type_by_id(id); ++id) {
    char bits[32];
    std::snprintf(bits, sizeof bits, "%g", 8.0 * t->block_bytes / t->block);
    s += (id ? ", " : "") + std::string(t->name) + " (" + bits + ")";
  }
  return s;
}

// What was read and written, on stderr, so stdout stays free for scripts.
void print_summary(const ConvertOptions& o, const ConvertSummary& s) {
  const ModelConfig& c = s.config;
  std::fprintf(stderr, "mmgpt convert: %s (%s, layout %s) -> %s\n", s.checkpoint.c_str(), s.container.c_str(),
               s.layout.c_str(), o.output.c_str());
  std::fprintf(stderr, "  model: %u layers, %u heads, width %u, context %u, vocabulary %u; %zu tensors, %llu bytes\n",
               c.n_layer, c.n_head, c.n_embd, c.n_ctx, c.vocab_size, s.tensors,
               static_cast<unsigned long long>(s.bytes));
  if (s.tokenizer_kind == TokenizerKind::None)
    std::fprintf(stderr, "  tokenizer: none\n");
  else
    std::fprintf(stderr, "  tokenizer: %s, %zu tokens, from %s\n", tokenizer_kind_name(s.tokenizer_kind),
                 s.tokenizer_size, s.tokenizer_source.c_str());
  for (const std::string& note : s.notes) std::fprintf(stderr, "  note: %s\n", note.c_str());
}

}  // namespace

void add_convert(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand("convert", "convert a PyTorch checkpoint to a .mmgpt file");
  cmd->add_option("input", o->input, "checkpoint file, or a directory holding one (Hugging Face style)")
      ->required()
      ->check(non_empty("path"));
  cmd->add_option("-o,--output", o->output, "output .mmgpt file")->required()->check(non_empty("path"));
  cmd->add_option("--layout", o->layout, "checkpoint layout (default: detected from tensor names)")
      ->check(CLI::IsMember({"auto", "hf-gpt2", "nanogpt", "llms-from-scratch"}));
  cmd->add_option("--n-head", o->n_head, "number of attention heads (required for llms-from-scratch)")
      ->check(count(1, 1 << 16));
  cmd->add_option("--tokenizer", o->tokenizer,
                  "tokenizer: meta.pkl, vocab.json/encoder.json, or a directory holding them")
      ->check(non_empty("path"));
  cmd->add_option("--weight-layout", o->weight_layout,
                  "how weight matrices are stored: panel16, the one layout written (kept for scripts that name it)")
      ->check(non_empty("layout"));
  cmd->add_option("--dtype", o->dtype,
                  "element type of the weight matrices, with its bits per weight: " + dtype_choices() +
                      "; f32 is the default, the others need panel16; norms, biases and wpe stay f32")
      ->check(CLI::IsMember(dtype_names()));
  cmd->add_option("--dtype-head", o->dtype_head,
                  "element type of the LM head (lm_head.weight, or wte when tied): " + weight_type_names() +
                      " (default: --dtype)")
      ->check(CLI::IsMember(dtype_names()));
  cmd->callback([o]() { print_summary(*o, convert_checkpoint(*o)); });
}

}  // namespace mmgpt::cli
