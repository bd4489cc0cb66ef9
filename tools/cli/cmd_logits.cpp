// mmgpt logits: the model's output distribution after every prompt token,
// as raw float32 little-endian [T, vocab], for comparison with PyTorch.
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unistd.h>

#include "engine/executor.hpp"
#include "engine/model.hpp"
#include "formats/error.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/token_ids.hpp"

namespace mmgpt::cli {

namespace {

// Writes `bytes` to `path` through a temporary file renamed into place, so a
// failure never leaves a partial file or clobbers an existing one.
void write_file_atomically(const std::string& path, const void* bytes, size_t size) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(path + ": cannot create output file: " + std::strerror(errno));
  bool ok = std::fwrite(bytes, 1, size, f) == size;
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(fileno(f)) == 0) && ok;
  int saved = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) saved = errno;
    std::remove(tmp.c_str());
    throw Error(path + ": cannot write output file: " + std::strerror(saved));
  }
}

}  // namespace

void add_logits(CLI::App& app) {
  struct Args {
    std::string model, ids, out;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("logits", "write the logits after every prompt token as float32 [T, vocab]");
  cmd->add_option("-m,--model", a->model, "model file (.mmgpt)")->required();
  cmd->add_option("--ids", a->ids, "token ids, e.g. \"1 2 3\"")->required();
  cmd->add_option("-o,--output", a->out, "output file (raw float32 little-endian, row t = after token t)")->required();
  cmd->callback([a]() {
    static_assert(std::endian::native == std::endian::little, "logits are written little-endian");
    auto model = Model::load(a->model);
    const ModelConfig& c = model->config();
    std::vector<int32_t> ids = parse_token_ids(a->ids, c.vocab_size);
    if (ids.size() > c.n_ctx)
      throw Error("--ids: " + std::to_string(ids.size()) + " tokens exceed the context length " +
                  std::to_string(c.n_ctx) + " of " + a->model);
    Executor executor(model);
    KVCache cache(c);
    std::span<const float> logits = executor.run(ids, cache, ids.size());
    write_file_atomically(a->out, logits.data(), logits.size_bytes());
  });
}

}  // namespace mmgpt::cli
