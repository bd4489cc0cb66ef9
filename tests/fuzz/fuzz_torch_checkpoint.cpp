// torch.save files, both the zip format and the legacy (pre-1.6) format, as
// `mmgpt convert` reads them: through load_torch_file on a path, then every
// tensor read, as a conversion reads them (tensors are read on demand, so a
// view that reached outside its storage would only show here).
#include <cstdint>
#include <cstdlib>
#include <set>

#include "formats/error.hpp"
#include "formats/torch_checkpoint.hpp"
#include "fuzz_input_file.hpp"

namespace {

void read_tensors(const mmgpt::pickle::Value& v, std::set<const mmgpt::pickle::Value*>& seen) {
  if (!seen.insert(&v).second) return;
  if (v.is_tensor() && v.tensor && v.tensor->readable()) {
    if (v.tensor->values().size() != v.tensor->numel()) std::abort();  // shape and values disagree
  }
  for (const auto& item : v.items) read_tensors(*item, seen);
  for (const auto& [key, value] : v.entries) {
    read_tensors(*key, seen);
    read_tensors(*value, seen);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mmgpt::fuzz::InputFile file("-ckpt.pt");
  try {
    const mmgpt::pickle::ValuePtr root = mmgpt::load_torch_file(file.write(data, size));
    std::set<const mmgpt::pickle::Value*> seen;
    read_tensors(*root, seen);
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
