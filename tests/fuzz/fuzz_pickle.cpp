// The restricted unpickler (and the opcode walker the legacy torch format
// uses) on arbitrary bytes: refuse or build a value, never crash or execute.
#include <cstdint>
#include <cstdlib>

#include "formats/error.hpp"
#include "formats/pickle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)mmgpt::pickle::unpickle(data, size, "fuzz.pkl");
  } catch (const mmgpt::Error&) {
  }
  try {
    const size_t n = mmgpt::pickle::pickle_length(data, size, "fuzz.pkl");
    if (n > size) std::abort();  // a length past the input would send the legacy reader out of bounds
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
