#pragma once
// Turns the bytes of generated tokens into text that is safe to show as it
// arrives: never half a UTF-8 character (a token may end inside one), and
// never the beginning of a stop string that may still complete (stop strings
// are matched across token boundaries and are not shown).
#include <string>
#include <string_view>
#include <vector>

namespace mmgpt {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop = {});

  // Adds a token's bytes; returns the bytes that can be shown now. After a
  // stop string has appeared, stopped() is true and the returned text ends
  // just before it; later pushes return nothing.
  std::string push(std::string_view bytes);
  // Returns whatever is still held back (an incomplete character, a partial stop string).
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::string& text() const { return shown_; }  // everything returned so far

 private:
  std::string emit(size_t n);

  std::vector<std::string> stop_;
  std::string pending_;
  std::string shown_;
  bool stopped_ = false;
};

}  // namespace mmgpt
