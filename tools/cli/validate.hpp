#pragma once
// Checks of option values shared by the subcommands. CLI11 reports a failed
// check as "OPTION: MESSAGE" on one line (main() prints it), so each message
// says what a good value is. They are stricter than CLI11's own conversions,
// which read "" as 0, wrap "-1" into a huge unsigned seed and saturate
// overflowing numbers: a value is accepted exactly as written or refused.
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "formats/model_config.hpp"

namespace mmgpt::cli {

// A path or string that must not be empty ("" is a mistake: an unset shell variable).
CLI::Validator non_empty(const char* what);

// A whole number written in decimal digits only (no sign, no fraction), in lo..hi.
CLI::Validator count(uint64_t lo, uint64_t hi);

// A finite number (NaN and infinities refused) within the range `range` describes,
// e.g. "(0, 1]": lo and hi, each end open or closed. Also finite as a float.
CLI::Validator real(double lo, bool lo_open, double hi, bool hi_open, const char* hint = "");

// The CPUs this process may run on (its affinity mask): the most threads that can run at once.
unsigned available_cpus();

// A thread count: 1..available_cpus(). More would be capped silently by the
// scheduler (or oversubscribe the bench's probes), so it is refused instead.
CLI::Validator thread_count();

// A comma-separated list of counts ("1,2,4"), each in lo..hi; no empty list or entry.
CLI::Validator count_list(uint64_t lo, uint64_t hi);
std::vector<uint64_t> parse_count_list(const std::string& text);  // after count_list() accepted it

// --kv-dtype f32|bf16|f16 (the KV cache's element type), shared by generate,
// perplexity and bench; parse_kv_dtype after the option accepted the value.
CLI::Option* add_kv_dtype_option(CLI::App* cmd, std::string& value);
WeightType parse_kv_dtype(const std::string& value);

// Throws mmgpt::Error when `output` is the very file `input` (same inode):
// writing it would destroy what is being read.
void refuse_overwriting(const std::string& output, const char* output_option, const std::string& input,
                        const char* input_what);

}  // namespace mmgpt::cli
