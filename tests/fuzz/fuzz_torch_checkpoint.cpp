// torch.save files, both the zip format and the legacy (pre-1.6) format, as
// `mmgpt convert` reads them: through load_torch_file on a path.
#include <cstdint>

#include "formats/error.hpp"
#include "formats/torch_checkpoint.hpp"
#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mmgpt::fuzz::InputFile file("-ckpt.pt");
  try {
    (void)mmgpt::load_torch_file(file.write(data, size));
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
