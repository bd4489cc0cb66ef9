// Values of the chat-template interpreter and Python's text for them (str,
// repr, json.dumps), with Python's equality, ordering and truth.
#include "text/jinja_value.hpp"

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "text/utf8.hpp"

namespace mmgpt::jinja {

namespace {

// Lists and dicts deeper than this are refused where they are built, so that
// printing, comparing and freeing them never recurses without bound.
constexpr int kMaxValueDepth = 200;

void check_depth(int depth) {
  if (depth > kMaxValueDepth)
    raise("a list or dict is nested more than " + std::to_string(kMaxValueDepth) + " levels deep");
}

int value_depth(const Value& v) {
  if (v.kind == Kind::List || v.kind == Kind::Tuple || v.kind == Kind::Dict) return v.i;
  return 0;
}

}  // namespace

void raise(std::string message) { throw RenderError{std::move(message)}; }

void raise_undefined(const Value& v) { raise(v.s ? *v.s : std::string("value is undefined")); }

Value Value::undefined(std::string hint) {
  Value v;
  v.kind = Kind::Undefined;
  v.s = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String;
  v.s = std::make_shared<const std::string>(std::move(x));
  return v;
}
// For containers `i` holds the nesting depth (see check_depth).
Value Value::list(ValueList x, bool tuple) {
  Value v;
  v.kind = tuple ? Kind::Tuple : Kind::List;
  int depth = 0;
  for (const Value& e : x) depth = std::max(depth, value_depth(e));
  check_depth(depth + 1);
  v.i = depth + 1;
  v.l = std::make_shared<const ValueList>(std::move(x));
  return v;
}
Value Value::dict(Dict x) {
  Value v;
  v.kind = Kind::Dict;
  int depth = 0;
  for (const auto& [k, e] : x.items) depth = std::max({depth, value_depth(k), value_depth(e)});
  check_depth(depth + 1);
  v.i = depth + 1;
  v.d = std::make_shared<const Dict>(std::move(x));
  return v;
}
Value Value::object(std::shared_ptr<Object> x) {
  Value v;
  v.kind = Kind::Object;
  v.o = std::move(x);
  return v;
}

// --- Dict

namespace {
constexpr size_t kIndexFrom = 16;  // dicts at least this large index their string keys
}

const Value* Dict::find(std::string_view key) const {
  if (!index_.empty()) {
    auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items)
    if (k.kind == Kind::String && *k.s == key) return &v;
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  if (key.kind == Kind::String) return find(std::string_view(*key.s));
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  if (key.kind == Kind::List || key.kind == Kind::Dict || key.kind == Kind::Undefined || key.kind == Kind::Object)
    raise(std::string("unhashable type: '") + type_name(key) + "'");
  if (key.kind == Kind::Tuple)
    for (const Value& e : *key.l)
      if (e.kind == Kind::List || e.kind == Kind::Dict) raise(std::string("unhashable type: '") + type_name(e) + "'");
  for (auto& [k, v] : items)
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
  if (items.size() == kIndexFrom)
    reindex();
  else if (items.size() > kIndexFrom && items.back().first.kind == Kind::String)
    index_.emplace(*items.back().first.s, items.size() - 1);
}

void Dict::reindex() {
  index_.clear();
  for (size_t n = 0; n < items.size(); ++n)
    if (items[n].first.kind == Kind::String) index_.emplace(*items[n].first.s, n);
}

// --- type names, truth, equality, order

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List:
      switch (v.origin) {
        case Origin::Plain: return "list";
        case Origin::Range: return "range";
        case Origin::Generator: return "generator";
        case Origin::DictKeys: return "dict_keys";
        case Origin::DictValues: return "dict_values";
        case Origin::DictItems: return "dict_items";
      }
      return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Object:
      switch (v.o->type) {
        case Object::Type::Namespace: return "Namespace";
        case Object::Type::Macro: return "Macro";
        case Object::Type::Loop: return "LoopContext";
        case Object::Type::Callable: return "builtin_function_or_method";
      }
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.kind == Kind::None) return "None";
  if (v.kind == Kind::Object && v.o->type == Object::Type::Namespace) return "jinja2.utils.Namespace object";
  if (v.kind == Kind::Object && v.o->type == Object::Type::Loop) return "jinja2.runtime.LoopContext object";
  if (v.kind == Kind::Object && v.o->type == Object::Type::Macro) return "jinja2.runtime.Macro object";
  return std::string(type_name(v)) + " object";
}

std::string Object::repr() const {
  raise(std::string("cannot print a ") + (type == Type::Callable ? "function or method" : "value of this kind") +
        " (Python would show its memory address)");
}

std::string NamespaceObject::repr() const { return "<Namespace " + py_repr(Value::dict(attrs)) + ">"; }

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i != 0;
    case Kind::Float: return v.f != 0;
    case Kind::String: return !v.s->empty();
    case Kind::List:
    case Kind::Tuple: return !v.l->empty();
    case Kind::Dict: return !v.d->items.empty();
    case Kind::Object: return true;
  }
  return true;
}

namespace {

// An int and a float compare exactly, as in Python (no rounding of the int).
int compare_int_double(int64_t a, double b) {
  if (std::isnan(b)) return 2;  // unordered
  if (b >= 9223372036854775808.0) return -1;
  if (b < -9223372036854775808.0) return 1;
  double t = std::trunc(b);
  int64_t bi = static_cast<int64_t>(t);
  if (a != bi) return a < bi ? -1 : 1;
  if (b > t) return -1;
  if (b < t) return 1;
  return 0;
}

// -1, 0, 1, or 2 when unordered (NaN).
int compare_numbers(const Value& a, const Value& b) {
  if (a.kind != Kind::Float && b.kind != Kind::Float) {
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind == Kind::Float && b.kind == Kind::Float) {
    if (std::isnan(a.f) || std::isnan(b.f)) return 2;
    return a.f < b.f ? -1 : a.f > b.f ? 1 : 0;
  }
  if (a.kind == Kind::Float) {
    int c = compare_int_double(b.as_int(), a.f);
    return c == 2 ? 2 : -c;
  }
  return compare_int_double(a.as_int(), b.f);
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == 0;
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return *a.s == *b.s;
    case Kind::List:
    case Kind::Tuple: {
      if (a.origin != b.origin) return false;
      if (a.l->size() != b.l->size()) return false;
      for (size_t n = 0; n < a.l->size(); ++n)
        if (!equals((*a.l)[n], (*b.l)[n])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.d->items.size() != b.d->items.size()) return false;
      for (const auto& [k, v] : a.d->items) {
        const Value* other = b.d->find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Kind::Object: return a.o == b.o;
    default: return false;
  }
}

bool less(const Value& a, const Value& b, const char* op) {
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == -1;
  if (a.kind == Kind::String && b.kind == Kind::String) return *a.s < *b.s;  // UTF-8 order is code point order
  if (a.kind == b.kind && a.is_sequence() && a.origin == Origin::Plain && b.origin == Origin::Plain) {
    const ValueList &x = *a.l, &y = *b.l;
    for (size_t n = 0; n < x.size() && n < y.size(); ++n)
      if (!equals(x[n], y[n])) return less(x[n], y[n], op);
    return x.size() < y.size();
  }
  raise(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) +
        "'");
}

// --- repr and str

namespace {
thread_local uint64_t text_limit = UINT64_MAX;

void check_text(const std::string& out) {
  if (out.size() > text_limit)
    raise("the text of a value passes the output limit of " + std::to_string(text_limit) + " bytes (max_output_bytes)");
}
}  // namespace

TextLimit::TextLimit(uint64_t bytes) : saved_(text_limit) { text_limit = bytes; }
TextLimit::~TextLimit() { text_limit = saved_; }

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, end);  // [-]d[.ddd]e[+-]XX, the shortest digits that round-trip
  std::string out;
  size_t pos = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    pos = 1;
  }
  size_t e = sci.find('e');
  std::string digits;
  for (size_t k = pos; k < e; ++k)
    if (sci[k] != '.') digits.push_back(sci[k]);
  int exp10 = std::atoi(sci.c_str() + e + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;  // digits are 0.DIGITS x 10^decpt
  const int nd = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {  // Python's repr switches to exponents outside this range
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= nd) {
      out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out += digits.substr(0, 1);
    if (nd > 1) out += "." + digits.substr(1);
    int x = decpt - 1;
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    out += eb;
  }
  return out;
}

namespace {

void append_hex(std::string& out, const char* prefix, uint32_t c, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, width, c);
  out += buf;
}

void append_string_repr(std::string& out, const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out.push_back(quote);
  for (char32_t c : to_u32(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      append_hex(out, "\\x", c, 2);
    } else if (c < 0x7f || is_printable(c)) {
      append_utf8(out, c);
    } else if (c < 0x100) {
      append_hex(out, "\\x", c, 2);
    } else if (c < 0x10000) {
      append_hex(out, "\\u", c, 4);
    } else {
      append_hex(out, "\\U", c, 8);
    }
  }
  out.push_back(quote);
}

// A range() value keeps Python's text for it ("range(0, 3)") in `s`.
std::string range_repr(const Value& v) { return v.s ? *v.s : "range(0, 0)"; }

}  // namespace

void append_repr(std::string& out, const Value& v, int depth) {
  switch (v.kind) {
    case Kind::String: append_string_repr(out, *v.s); return;
    case Kind::Undefined: out += "Undefined"; return;
    case Kind::List:
    case Kind::Tuple: {
      if (v.origin == Origin::Range) {
        out += range_repr(v);
        return;
      }
      if (v.origin == Origin::Generator) raise("cannot print a generator (Python would show its memory address)");
      if (v.origin != Origin::Plain) {  // dict_keys(['a']), dict_items([('a', 1)])
        Value plain = v;
        plain.origin = Origin::Plain;
        out += type_name(v);
        out.push_back('(');
        append_repr(out, plain, depth);
        out.push_back(')');
        return;
      }
      const bool tuple = v.kind == Kind::Tuple;
      out.push_back(tuple ? '(' : '[');
      for (size_t n = 0; n < v.l->size(); ++n) {
        if (n) out += ", ";
        append_repr(out, (*v.l)[n], depth + 1);
        check_text(out);
      }
      if (tuple && v.l->size() == 1) out.push_back(',');
      out.push_back(tuple ? ')' : ']');
      return;
    }
    case Kind::Dict: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, e] : v.d->items) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, k, depth + 1);
        out += ": ";
        append_repr(out, e, depth + 1);
        check_text(out);
      }
      out.push_back('}');
      return;
    }
    default: out += py_str(v); return;
  }
}

std::string py_repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

std::string py_str(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: return float_repr(v.f);
    case Kind::String: return *v.s;
    case Kind::List:
    case Kind::Tuple:
    case Kind::Dict: return py_repr(v);
    case Kind::Object: return v.o->repr();
  }
  return "";
}

// --- json.dumps

namespace {

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : to_u32(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
          if (c >= 0x10000) {
            char32_t u = c - 0x10000;
            append_hex(out, "\\u", 0xD800 + (u >> 10), 4);
            append_hex(out, "\\u", 0xDC00 + (u & 0x3FF), 4);
          } else {
            append_hex(out, "\\u", c, 4);
          }
        } else {
          append_utf8(out, c);
        }
    }
  }
  out.push_back('"');
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return float_repr(f);
}

// The end of a list or dict: with indent, on its own line at the enclosing level.
void close_json(std::string& out, const JsonOptions& o, int level, char bracket) {
  if (o.indented) {
    out.push_back('\n');
    for (int k = 0; k < level; ++k) out += o.indent;
  }
  out.push_back(bracket);
}

void append_json(std::string& out, const Value& v, const JsonOptions& o, int level) {
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.i); return;
    case Kind::Float: out += json_float(v.f); return;
    case Kind::String: append_json_string(out, *v.s, o.ensure_ascii); return;
    case Kind::List:
    case Kind::Tuple: {
      if (v.origin != Origin::Plain) break;
      if (v.l->empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      std::string newline;
      if (o.indented) {
        newline = "\n";
        for (int k = 0; k <= level && newline.size() <= text_limit; ++k) newline += o.indent;
        check_text(newline);
        out += newline;
      }
      for (size_t n = 0; n < v.l->size(); ++n) {
        if (n) out += o.item_sep + newline;
        append_json(out, (*v.l)[n], o, level + 1);
        check_text(out);
      }
      close_json(out, o, level, ']');
      return;
    }
    case Kind::Dict: {
      if (v.d->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.d->items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return less(a->first, b->first); });
      out.push_back('{');
      std::string newline;
      if (o.indented) {
        newline = "\n";
        for (int k = 0; k <= level && newline.size() <= text_limit; ++k) newline += o.indent;
        check_text(newline);
        out += newline;
      }
      bool first = true;
      for (const auto* kv : items) {
        const Value& k = kv->first;
        std::string key;
        switch (k.kind) {
          case Kind::String: key = *k.s; break;
          case Kind::Int: key = std::to_string(k.i); break;
          case Kind::Float: key = json_float(k.f); break;
          case Kind::Bool: key = k.b ? "true" : "false"; break;
          case Kind::None: key = "null"; break;
          default: raise(std::string("keys must be str, int, float, bool or None, not ") + type_name(k));
        }
        if (!first) out += o.item_sep + newline;
        first = false;
        append_json_string(out, key, o.ensure_ascii);
        out += o.key_sep;
        append_json(out, kv->second, o, level + 1);
        check_text(out);
      }
      close_json(out, o, level, '}');
      return;
    }
    default: break;
  }
  raise(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  append_json(out, v, options, 0);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value::boolean(j.get<bool>());
    case T::number_integer: return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) raise("integer " + std::to_string(u) + " is too large (past int64)");
      return Value::integer(static_cast<int64_t>(u));
    }
    case T::number_float: return Value::number(j.get<double>());
    case T::string: {
      const std::string& s = j.get_ref<const std::string&>();
      if (!valid_utf8(s)) raise("a string of the template's variables is not valid UTF-8");
      return Value::string(s);
    }
    case T::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::list(std::move(items));
    }
    case T::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!valid_utf8(it.key())) raise("a key of the template's variables is not valid UTF-8");
        d.set(Value::string(it.key()), from_json(it.value()));
      }
      return Value::dict(std::move(d));
    }
    default: raise("the template's variables hold a value JSON cannot express (binary or discarded)");
  }
}

// --- Unicode text

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c0 = static_cast<unsigned char>(s[i]);
    size_t n = utf8::sequence_length(c0);
    if (n == 0 || i + n > s.size()) {  // not reached for checked text; keep the byte as a code point
      out.push_back(c0);
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? c0 : (c0 & (0x7F >> n));
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c0 = static_cast<unsigned char>(s[i]);
    const size_t n = utf8::sequence_length(c0);
    if (n == 0 || i + n > s.size()) return false;
    char32_t cp = n == 1 ? c0 : (c0 & (0x7F >> n));
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    // No overlong forms, surrogates or code points past U+10FFFF.
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) return false;
    i += n;
  }
  return true;
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_cased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR: return false;
    default: return true;
  }
}

namespace {

enum class Case { Upper, Lower, Title };

// ICU's full case mappings (the root locale's, as Python's are language-free).
std::string map_case(std::string_view s, Case which) {
  if (s.empty()) return {};
  UErrorCode err = U_ZERO_ERROR;
  int32_t n16 = 0;
  u_strFromUTF8(nullptr, 0, &n16, s.data(), static_cast<int32_t>(s.size()), &err);
  err = U_ZERO_ERROR;
  std::u16string src(static_cast<size_t>(n16), u'\0');
  u_strFromUTF8(reinterpret_cast<UChar*>(src.data()), n16, nullptr, s.data(), static_cast<int32_t>(s.size()), &err);
  std::u16string dst(src.size() * 3 + 4, u'\0');
  err = U_ZERO_ERROR;
  auto* d = reinterpret_cast<UChar*>(dst.data());
  const auto* p = reinterpret_cast<const UChar*>(src.data());
  const auto cap = static_cast<int32_t>(dst.size());
  int32_t len = which == Case::Upper   ? u_strToUpper(d, cap, p, n16, "", &err)
                : which == Case::Lower ? u_strToLower(d, cap, p, n16, "", &err)
                                       : u_strToTitle(d, cap, p, n16, nullptr, "", &err);
  if (U_FAILURE(err)) raise("case mapping failed");
  dst.resize(static_cast<size_t>(len));
  std::string out;
  int32_t n8 = 0;
  err = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &n8, d, len, &err);
  out.resize(static_cast<size_t>(n8));
  err = U_ZERO_ERROR;
  u_strToUTF8(out.data(), n8, nullptr, d, len, &err);
  return out;
}

}  // namespace

std::string to_upper(std::string_view s) { return map_case(s, Case::Upper); }
std::string to_lower(std::string_view s) { return map_case(s, Case::Lower); }
std::string title_char(char32_t c) {
  std::string one;
  append_utf8(one, c);
  return map_case(one, Case::Title);
}

std::string strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::u32string u = to_u32(s);
  std::u32string set = chars ? to_u32(*chars) : std::u32string();
  auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strippable(u[b])) ++b;
  if (right)
    while (e > b && strippable(u[e - 1])) --e;
  return to_utf8(std::u32string_view(u).substr(b, e - b));
}

}  // namespace mmgpt::jinja
