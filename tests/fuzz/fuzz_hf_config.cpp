// A Hugging Face config.json through the hf-llama and hf-gpt-neox layouts'
// mapping (family, hyper-parameters, rope scaling, sliding window): the input
// is written as config.json in a per-process directory; the state dict is
// empty, so a config that passes ends at the first missing tensor.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "formats/error.hpp"
#include "fuzz_input_file.hpp"
#include "tools/convert/layout.hpp"

namespace {

struct Directory {
  std::string path = "/dev/shm/mmgpt-fuzz-" + std::to_string(::getpid()) + "-hf";  // where InputFile writes
  Directory() { ::mkdir(path.c_str(), 0700); }
  ~Directory() {
    ::unlink((path + "/config.json").c_str());
    ::rmdir(path.c_str());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Directory dir;
  static const mmgpt::fuzz::InputFile file("-hf/config.json");
  (void)dir;
  file.write(data, size);
  const mmgpt::convert::StateDict empty;
  mmgpt::convert::LayoutInput in;
  in.file = dir.path + "/model.safetensors";
  in.weights = &empty;
  in.directory = dir.path;
  for (auto kind : {mmgpt::convert::LayoutKind::HfLlama, mmgpt::convert::LayoutKind::HfGptNeox}) {
    try {
      (void)mmgpt::convert::map_layout(kind, in);
    } catch (const mmgpt::Error&) {
    }
  }
  return 0;
}
