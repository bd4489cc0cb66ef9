#include "tools/cli/validate.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <tbb/info.h>

#include "core/weight_type.hpp"
#include "formats/error.hpp"

namespace mmgpt::cli {

namespace {

std::string range_text(uint64_t lo, uint64_t hi) { return std::to_string(lo) + ".." + std::to_string(hi); }

// The value of `s` if it is decimal digits only and fits in 64 bits.
std::optional<uint64_t> whole_number(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string check_count(const std::string& s, uint64_t lo, uint64_t hi) {
  if (s.empty()) return "empty value (expected a whole number in " + range_text(lo, hi) + ")";
  const std::optional<uint64_t> v = whole_number(s);
  if (!v || *v < lo || *v > hi) return "'" + s + "' is not a whole number in " + range_text(lo, hi);
  return {};
}

}  // namespace

CLI::Validator non_empty(const char* what) {
  const std::string w = what;
  return CLI::Validator(
      [w](std::string& s) { return s.empty() ? "empty " + w + " (an unset shell variable?)" : std::string(); }, "");
}

CLI::Validator count(uint64_t lo, uint64_t hi) {
  return CLI::Validator([lo, hi](std::string& s) { return check_count(s, lo, hi); }, "in " + range_text(lo, hi));
}

CLI::Validator real(double lo, bool lo_open, double hi, bool hi_open, const char* hint) {
  auto fmt = [](double x) {
    if (std::isinf(x)) return std::string(x > 0 ? "inf" : "-inf");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  const std::string range = std::string(lo_open ? "(" : "[") + fmt(lo) + ", " + fmt(hi) + (hi_open ? ")" : "]");
  const std::string tail = hint;
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        double v = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        // What the option will hold is a float: its value must be finite and in range too.
        const float f = static_cast<float>(v);
        const bool ok = !s.empty() && ec == std::errc() && end == s.data() + s.size() && std::isfinite(f) &&
                        (lo_open ? f > lo : f >= lo) && (hi_open ? f < hi : f <= hi);
        if (ok) return {};
        return (s.empty() ? std::string("empty value") : "'" + s + "'") + " is not a finite number in " + range + tail;
      },
      "in " + range);
}

unsigned available_cpus() {
  const int n = tbb::info::default_concurrency();  // the affinity mask, as the scheduler sees it
  return n > 0 ? static_cast<unsigned>(n) : 1u;
}

CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const unsigned cpus = available_cpus();
        const std::optional<uint64_t> v = whole_number(s);
        if (v && *v > cpus && *v <= std::numeric_limits<uint32_t>::max())
          return "'" + s + "' is more threads than the " + std::to_string(cpus) +
                 " CPU(s) mmgpt may run on here (expected 1.." + std::to_string(cpus) + ")";
        return check_count(s, 1, cpus);
      },
      "in 1..CPUs");
}

CLI::Validator count_list(uint64_t lo, uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        const std::string expected = " (expected counts in " + range_text(lo, hi) + " separated by commas)";
        if (s.empty()) return "empty list" + expected;
        size_t start = 0;
        while (true) {
          const size_t comma = s.find(',', start);
          const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
          if (item.empty()) return "'" + s + "' has an empty entry" + expected;
          const std::optional<uint64_t> v = whole_number(item);
          if (!v || *v < lo || *v > hi)
            return "'" + item + "' in '" + s + "' is not a whole number in " + range_text(lo, hi);
          if (comma == std::string::npos) return {};
          start = comma + 1;
        }
      },
      "LIST in " + range_text(lo, hi));
}

std::vector<uint64_t> parse_count_list(const std::string& text) {
  std::vector<uint64_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.push_back(whole_number(item).value_or(0));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void refuse_overwriting(const std::string& output, const char* output_option, const std::string& input,
                        const char* input_what) {
  std::error_code ec;
  if (std::filesystem::exists(output, ec) && std::filesystem::equivalent(output, input, ec))
    throw Error(std::string(output_option) + ": " + output + " is " + input_what +
                " itself; refusing to overwrite what is being read");
}

// The weight types a KV cache may hold (the element-wise ones).
static std::vector<std::string> kv_dtype_names() {
  std::vector<std::string> names;
  for (uint32_t id = 0; const WeightTypeInfo* t = weight_type_by_id(id); ++id)
    if (t->element_wise) names.emplace_back(t->name);
  return names;
}

CLI::Option* add_kv_dtype_option(CLI::App* cmd, std::string& value) {
  return cmd
      ->add_option("--kv-dtype", value,
                   "element type of the KV cache: f32 (default), or bf16 / f16: half the memory and half the bytes "
                   "each decode step reads from the cache (keys and values rounded to nearest even)")
      ->check(CLI::IsMember(kv_dtype_names()));
}

WeightType parse_kv_dtype(const std::string& value) {
  return weight_type_by_name(value)->type;  // one of add_kv_dtype_option's names
}

}  // namespace mmgpt::cli
