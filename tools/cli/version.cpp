// mmgpt --version: the release on the first line (what scripts read), then
// the commit, the compiler, the system calls used, and the kernels built in and in use (chosen for
// this CPU, or forced by MMGPT_ISA and its kin).
#include <string>
#include <string_view>

#include "core/platform.hpp"
#include "core/version.hpp"
#include "kernels/kernels.hpp"
#include "tools/cli/commands.hpp"

namespace mmgpt::cli {

std::string version_text() {
  std::string s = "mmgpt " + std::string(version()) + "\n";
  s += "commit    " + std::string(git_commit()) + "\n";
  s += "compiler  " + std::string(compiler()) + ", C++" + std::to_string(__cplusplus / 100 % 100);
  if (!sanitizer().empty()) s += ", instrumented with " + std::string(sanitizer());
  s += "\n";
  const std::string_view system = platform::name();
  s += "system    " + std::string(system) + (system == "posix" ? " (POSIX calls only)" : "") + "\n";
  s += "kernels   built in: " + kernels::built_isas() + "\n";
  s += "          in use: " + std::string(kernels::isa_name()) + ", quantized " +
       std::string(kernels::quant_isa_name()) + ", bf16 " + kernels::describe_bf16() + ", decode prefetch " +
       kernels::describe_decode_prefetch() + "\n";
  s += "          AMX tiles: " + kernels::describe_amx();
  return s;
}

}  // namespace mmgpt::cli
