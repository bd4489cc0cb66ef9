// mmgpt convert: PyTorch checkpoint (+ tokenizer files) -> one .mmgpt file.
#include <cstdio>
#include <memory>
#include <string>

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
  }
  return "?";
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
                  "how weight matrices are stored: panel16 (default: what the fast kernels read) or row-major")
      ->check(CLI::IsMember({"panel16", "row-major"}));
  cmd->add_option("--dtype", o->dtype,
                  "element type of the weight matrices: f32 (default), bf16, f16, or the block-quantized q8_0 "
                  "(8.5 bits per weight) and q4_0 (4.5 bits); all but f32 need panel16; norms, biases and wpe stay f32")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "q8_0", "q4_0"}));
  cmd->add_option("--dtype-head", o->dtype_head,
                  "element type of the LM head (lm_head.weight, or wte when tied): f32, bf16, f16, q8_0 or q4_0 "
                  "(default: --dtype)")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "q8_0", "q4_0"}));
  cmd->callback([o]() {
    print_summary(*o, convert_checkpoint(*o));
  });
}

}  // namespace mmgpt::cli
