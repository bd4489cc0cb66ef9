// mmgpt logits: the model's output distribution after every prompt token,
// as raw float32 little-endian [T, vocab], for comparison with PyTorch.
#include <bit>
#include <memory>
#include <string>

#include "engine/mmgpt.hpp"
#include "formats/atomic_file.hpp"
#include "formats/error.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/token_ids.hpp"
#include "tools/cli/validate.hpp"

namespace mmgpt::cli {

void add_logits(CLI::App& app) {
  struct Args {
    std::string model, ids, out;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("logits", "write the logits after every prompt token as float32 [T, vocab]");
  cmd->add_option("-m,--model", a->model, "model file (.mmgpt)")->required()->check(non_empty("path"));
  cmd->add_option("--ids", a->ids, "token ids, e.g. \"1 2 3\"")->required();
  cmd->add_option("-o,--output", a->out, "output file (raw float32 little-endian, row t = after token t)")
      ->required()
      ->check(non_empty("path"));
  cmd->callback([a]() {
    static_assert(std::endian::native == std::endian::little, "logits are written little-endian");
    const LanguageModel lm = LanguageModel::load(a->model);
    refuse_overwriting(a->out, "-o", a->model, "the model file");
    const std::vector<int32_t> ids = parse_token_ids(a->ids, lm.config().vocab_size);
    const std::vector<float> logits = lm.logits(ids);  // refuses more ids than the context length
    AtomicFile out(a->out);                            // never a partial file, never a clobbered one on failure
    out.write(logits.data(), logits.size() * sizeof(float));
    out.commit();
  });
}

}  // namespace mmgpt::cli
