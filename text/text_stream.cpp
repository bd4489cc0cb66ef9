#include "text/text_stream.hpp"
#include "text/utf8.hpp"

#include <algorithm>

namespace mmgpt {

namespace {

// The largest n <= end such that s[0, n) does not end inside an incomplete UTF-8 character.
size_t utf8_safe_end(std::string_view s, size_t end) {
  for (size_t back = 1; back <= 3 && back <= end; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[end - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t n = utf8::sequence_length(c);
    return n > back ? end - back : end;  // a lead byte whose character is not complete yet
  }
  return end;  // stray continuation bytes: pass them through
}

}  // namespace

TextStream::TextStream(std::vector<std::string> stop) {
  for (std::string& s : stop)
    if (!s.empty()) stop_.push_back(std::move(s));
}

std::string TextStream::emit(size_t n) {
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  shown_ += out;
  return out;
}

std::string TextStream::push(std::string_view bytes) {
  if (stopped_) return {};
  pending_.append(bytes);

  // Everything before pending_ was shown, and no shown suffix could start a
  // stop string (it was held back), so a match can only start inside pending_.
  size_t first = std::string::npos;
  for (const std::string& s : stop_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = emit(first);
    pending_.clear();
    return out;
  }

  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stop_)
    for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n)
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  return emit(utf8_safe_end(pending_, pending_.size() - hold));
}

std::string TextStream::flush() {
  if (stopped_) return {};
  return emit(pending_.size());
}

}  // namespace mmgpt
