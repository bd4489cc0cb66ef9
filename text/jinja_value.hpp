#pragma once
// The values a chat template computes with, and how Python shows them.
// Jinja2 renders Python objects: `{{ x }}` prints str(x), lists print their
// elements' repr(), tojson is json.dumps. These values are JSON's plus what a
// template makes (tuples, ranges, undefined, namespaces, macros, the loop
// object, callables), and the functions here reproduce Python's text for each.
// Strings are UTF-8 (checked where they enter); lists and dicts are immutable
// once built (the sandbox forbids mutating them), so copies share them.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mmgpt::jinja {

struct Value;
struct Dict;
struct Object;
using ValueList = std::vector<Value>;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Object };

// What made a List: Python has iterables that are not lists and print, compare
// and serialise differently (a range prints as range(0, 3); a generator or a
// dict view cannot go through json.dumps).
enum class Origin : uint8_t { Plain, Range, Generator, DictKeys, DictValues, DictItems };

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;  // Bool: the value; String: a Markup string (|safe, |escape): `+` escapes the other side
  Origin origin = Origin::Plain;  // List
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // String; Undefined: the message raised when it is used
  std::shared_ptr<const ValueList> l;    // List, Tuple
  std::shared_ptr<const Dict> d;         // Dict
  std::shared_ptr<Object> o;             // Object (namespace, macro, loop, callable)

  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value list(ValueList v, bool tuple = false);
  static Value dict(Dict v);
  static Value object(std::shared_ptr<Object> v);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_string() const { return kind == Kind::String; }
  bool is_sequence() const { return kind == Kind::List || kind == Kind::Tuple; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  const std::string& str() const { return *s; }
  // The integer value of an Int or Bool (Python's bool is an int).
  int64_t as_int() const { return kind == Kind::Bool ? (b ? 1 : 0) : i; }
  double as_double() const { return kind == Kind::Float ? f : static_cast<double>(as_int()); }
};

// A Python dict: keys in insertion order; string keys are also indexed once
// the dict is large, so lookups in big tool schemas stay cheap.
struct Dict {
  std::vector<std::pair<Value, Value>> items;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts, or replaces the value of an equal key in place (as a dict literal does).
  void set(Value key, Value value);

 private:
  std::unordered_map<std::string, size_t> index_;
  void reindex();
};

// Values that are not plain data: each kind is defined by the interpreter.
struct Object {
  enum class Type : uint8_t { Namespace, Macro, Loop, Callable };
  explicit Object(Type t) : type(t) {}
  virtual ~Object() = default;
  // Python's str() of it; the default refuses (Python would print an address).
  virtual std::string repr() const;
  const Type type;
};

// namespace(): the one mutable value, assigned with {% set ns.attr = ... %}.
struct NamespaceObject : Object {
  NamespaceObject() : Object(Type::Namespace) {}
  std::string repr() const override;
  Dict attrs;
};

// Thrown while rendering for what Python would raise; the interpreter adds the
// template's name and line.
struct RenderError {
  std::string message;
};

[[noreturn]] void raise(std::string message);
// Raises the UndefinedError that using an undefined value raises.
[[noreturn]] void raise_undefined(const Value& v);

// Python's type name of a value ("str", "int", "NoneType", "dict", ...).
const char* type_name(const Value& v);
// Jinja2's object_type_repr: "None", "dict object", "list object", ...
std::string object_type_repr(const Value& v);

// Python's truth value.
bool truthy(const Value& v);
// Python's ==, with 1 == 1.0 == True and containers compared element-wise.
bool equals(const Value& a, const Value& b);
// Python's <: numbers, strings (code point order), lists and tuples
// lexicographically; anything else raises TypeError as Python does.
bool less(const Value& a, const Value& b, const char* op = "<");

// Bounds the text py_str, py_repr and to_json build on this thread while it
// lives: past `bytes` they raise (a list of lists sharing one long string
// would otherwise print as gigabytes).
class TextLimit {
 public:
  explicit TextLimit(uint64_t bytes);
  ~TextLimit();
  TextLimit(const TextLimit&) = delete;
  TextLimit& operator=(const TextLimit&) = delete;

 private:
  uint64_t saved_;
};

// str(v) and repr(v) as Python writes them (undefined prints as "").
std::string py_str(const Value& v);
std::string py_repr(const Value& v);
void append_repr(std::string& out, const Value& v, int depth = 0);
// Python's repr of a float ("1.0", "1e+16", "0.0001", "inf").
std::string float_repr(double v);

struct JsonOptions {
  std::string indent;  // empty and !indented: one line
  bool indented = false;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(v, ...) with the given options.
std::string to_json(const Value& v, const JsonOptions& options);

// A value from JSON: objects keep their key order.
Value from_json(const nlohmann::ordered_json& j);

// --- UTF-8 text as Python's str sees it (code points).
std::u32string to_u32(std::string_view s);
std::string to_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
// Strict UTF-8: no overlong forms, surrogates or code points past U+10FFFF.
bool valid_utf8(std::string_view s);
// Number of code points of valid UTF-8.
size_t code_points(std::string_view s);
// Python's str.isspace() for one code point.
bool is_space(char32_t c);
// Python's str.upper() / lower() (full case mappings) and the title case of one code point.
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);
std::string title_char(char32_t c);
bool is_cased(char32_t c);
bool is_printable(char32_t c);
// Python's str.strip() family: no chars given strips whitespace.
std::string strip(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace mmgpt::jinja
