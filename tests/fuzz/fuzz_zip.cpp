// The zip reader on arbitrary bytes: every entry it accepts must lie inside
// the archive, and lookups by name must agree with the entry list.
#include <cstdint>
#include <cstdlib>

#include "formats/error.hpp"
#include "formats/zip_reader.hpp"
#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)mmgpt::ZipReader::looks_like_zip(data, size);
  try {
    const mmgpt::ZipReader zip(data, size, "fuzz.zip");
    for (const mmgpt::ZipEntry& e : zip.entries()) {
      if (e.data_offset > size || e.size > size - e.data_offset) std::abort();
      if (zip.find(e.name) == nullptr) std::abort();
      const auto bytes = zip.bytes(e);
      mmgpt::fuzz::touch(bytes.data(), bytes.size());
    }
  } catch (const mmgpt::Error&) {
  }
  return 0;
}
