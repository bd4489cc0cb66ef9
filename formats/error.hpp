#pragma once
// The one exception type mmgpt throws for bad input, bad files and misuse.
// Its message is a complete one-line sentence meant for the user: it names the
// file (when there is one), the field and the offending value. The CLI prints
// it as-is on stderr and exits non-zero.
#include <stdexcept>
#include <string>

namespace mmgpt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace mmgpt
