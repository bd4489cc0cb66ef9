// Structured output's parsers (text/json_schema.hpp, text/grammar.hpp): the
// input's first byte picks the kind (even: a JSON schema, odd: GBNF text); the
// definition runs to the first NUL after it, and the rest is an output to
// match. A schema that compiles must give a grammar that parses, unless a
// $ref loop makes it left-recursive; the matcher must agree with itself: a
// whole sentence is a prefix, and a prefix of a prefix is one too.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "formats/error.hpp"
#include "text/grammar.hpp"
#include "text/json_schema.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 65536) return 0;
  const bool gbnf = data[0] & 1;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view definition = rest.substr(0, nul);
  const std::string_view output = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  std::string text;
  if (gbnf) {
    text = std::string(definition);
  } else {
    try {
      text = mmgpt::json_schema_grammar(definition, "schema");
    } catch (const mmgpt::Error&) {
      return 0;
    }
  }
  std::shared_ptr<const mmgpt::Grammar> g;
  try {
    g = mmgpt::Grammar::parse(text, "grammar");
  } catch (const mmgpt::Error& e) {
    // A schema's grammar fails only by left recursion (a $ref loop that produces nothing) or by size.
    const std::string what = e.what();
    if (!gbnf && what.find("left recursion") == std::string::npos && what.find("elements") == std::string::npos)
      std::abort();
    return 0;
  }
  try {
    const bool whole = mmgpt::GrammarMatcher::matches(*g, output, true);
    const bool prefix = mmgpt::GrammarMatcher::matches(*g, output, false);
    if (whole && !prefix) std::abort();
    if (prefix && !mmgpt::GrammarMatcher::matches(*g, output.substr(0, output.size() / 2), false)) std::abort();
  } catch (const mmgpt::Error&) {
    // the parse grew past a bound (an ambiguous grammar): refused, not a crash
  }
  return 0;
}
