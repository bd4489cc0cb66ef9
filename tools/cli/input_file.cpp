#include "tools/cli/input_file.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "formats/error.hpp"

namespace mmgpt::cli {

std::string read_input_file(const std::string& path, const char* what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(std::string("-f: ") + what + " not found: " + path);
  if (std::filesystem::is_directory(path, ec)) throw Error("-f: " + path + " is a directory, not a " + what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("-f: cannot open " + path + ": " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("-f: cannot read " + path + ": " + std::strerror(errno));
  return bytes;
}

}  // namespace mmgpt::cli
