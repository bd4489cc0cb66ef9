#pragma once
#include <string>

namespace mmgpt::cli {

// The whole of a file named with -f, as bytes. Throws mmgpt::Error naming the
// file when it is missing, a directory, or unreadable; `what` says what the
// file should have been ("text file", "token id file").
std::string read_input_file(const std::string& path, const char* what);

}  // namespace mmgpt::cli
