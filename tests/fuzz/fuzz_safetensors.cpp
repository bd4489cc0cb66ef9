// .safetensors files through load_safetensors on a path, then every tensor
// read, as a conversion reads them.
#include <cstdint>
#include <cstdlib>

#include "formats/error.hpp"
#include "formats/torch_checkpoint.hpp"
#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mmgpt::fuzz::InputFile file("-model.safetensors");
  try {
    for (const auto& [name, tensor] : mmgpt::load_safetensors(file.write(data, size))) {
      uint64_t numel = 1;
      for (auto d : tensor.shape) numel *= static_cast<uint64_t>(d);
      if (numel != tensor.values().size()) std::abort();  // shape and values disagree
    }
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
