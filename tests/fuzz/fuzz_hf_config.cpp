// A model config through every layout that reads one: a Hugging Face
// config.json through hf-llama and hf-gpt-neox (family, hyper-parameters,
// rope scaling, sliding window), written as config.json in a per-process
// directory; the same text as the config given in memory to the book's
// Llama3Model / Qwen3Model and to nanochat (its meta_<step>.json or
// model_config: window_pattern, sizes). The state dict is empty, so a config
// that passes ends at the first missing tensor.
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
  in.config_text.assign(reinterpret_cast<const char*>(data), size);
  if (in.config_text.empty()) return 0;  // "" means "no config given"
  in.file = "model_000001.pt";
  in.directory.clear();
  for (auto map : {&mmgpt::convert::map_nanochat, &mmgpt::convert::map_llms_modern}) {
    try {
      (void)map(in);
    } catch (const mmgpt::Error&) {
    }
  }
  return 0;
}
