// A Hugging Face shard index (model.safetensors.index.json) through
// read_shard_index: the input is the index, in a per-process directory that
// holds one shard file, so names that resolve and names that do not both occur.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "formats/error.hpp"
#include "fuzz_input_file.hpp"
#include "tools/convert/checkpoint_loader.hpp"

namespace {

struct Directory {
  std::string path = "/dev/shm/mmgpt-fuzz-" + std::to_string(::getpid()) + "-shards";  // where InputFile writes
  Directory() {
    ::mkdir(path.c_str(), 0700);
    if (std::FILE* f = std::fopen((path + "/model-00001-of-00002.safetensors").c_str(), "wb")) std::fclose(f);
  }
  ~Directory() {
    ::unlink((path + "/model-00001-of-00002.safetensors").c_str());
    ::unlink((path + "/model.safetensors.index.json").c_str());
    ::rmdir(path.c_str());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Directory dir;
  static const mmgpt::fuzz::InputFile file("-shards/model.safetensors.index.json");
  try {
    for (const mmgpt::convert::Shard& s : mmgpt::convert::read_shard_index(file.write(data, size)))
      (void)mmgpt::fuzz::touch(s.path.data(), s.path.size());
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
