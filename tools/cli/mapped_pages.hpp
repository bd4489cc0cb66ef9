#pragma once
#include <cstddef>
#include <optional>

namespace mmgpt::cli {

// How much of the file mapping that contains `address` is mapped with 2 MB
// pages (PMD-mapped page-cache folios), from /proc/self/smaps: mapped bytes on
// 2 MB pages / the mapping's size. Decode streams every weight once per token,
// and on 4 KB pages it pays a TLB miss every 4 KB. Empty where the kernel does
// not say (not Linux, no /proc, no such mapping).
std::optional<double> huge_mapped_share(const void* address);

}  // namespace mmgpt::cli
