#include "tools/cli/mapped_pages.hpp"

#include <cinttypes>
#include <cstdint>
#include <cstdio>

namespace mmgpt::cli {

std::optional<double> huge_mapped_share(const void* address) {
  std::FILE* f = std::fopen("/proc/self/smaps", "re");
  if (!f) return std::nullopt;
  const auto at = reinterpret_cast<uintptr_t>(address);
  char line[512];
  bool inside = false;
  uint64_t size_kb = 0;
  std::optional<double> share;
  while (std::fgets(line, sizeof line, f)) {
    uintptr_t lo = 0, hi = 0;
    // A mapping's header is "lo-hi perms offset dev inode path"; its fields
    // ("Size:   12 kB") never start with hex digits and a dash.
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2) {
      if (inside) break;  // the mapping ended without the field
      inside = lo <= at && at < hi;
      continue;
    }
    if (!inside) continue;
    uint64_t kb = 0;
    if (std::sscanf(line, "Size: %" SCNu64 " kB", &kb) == 1) size_kb = kb;
    if (std::sscanf(line, "FilePmdMapped: %" SCNu64 " kB", &kb) == 1) {
      if (size_kb > 0) share = double(kb) / double(size_kb);
      break;
    }
  }
  std::fclose(f);
  return share;
}

}  // namespace mmgpt::cli
