// The chat-template interpreter's builtins: Jinja2's filters and tests, the
// methods of Python's str, dict and list that templates call, and the globals
// transformers provides (range, namespace, dict, raise_exception,
// strftime_now). Each follows jinja2/filters.py, jinja2/tests.py or Python's
// own behaviour; what is not interpreted is refused by name.
#include <unicode/uchar.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "text/jinja_interp.hpp"

namespace mmgpt::jinja {

namespace {

bool is_int(const Value& v) { return v.kind == Kind::Int || v.kind == Kind::Bool; }

int64_t need_int(const Value& v, const std::string& what) {
  if (!is_int(v)) raise("'" + std::string(type_name(v)) + "' object cannot be interpreted as an integer (" + what + ")");
  return v.as_int();
}

const std::string& need_str(const Value& v, const std::string& what) {
  if (v.kind != Kind::String) raise(what + " must be a str, not " + type_name(v));
  return *v.s;
}

// Python's str.find on code points: the code point index of `sub` in `s`, or -1.
int64_t cp_index(const std::string& s, size_t byte_pos) {
  return byte_pos == std::string::npos ? -1 : static_cast<int64_t>(code_points(std::string_view(s).substr(0, byte_pos)));
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

bool is_word_char(char32_t c) {  // Python's \w: letters, numbers (str.isalnum) and the underscore
  if (c == '_') return true;
  const int t = u_charType(static_cast<UChar32>(c));
  return (t >= U_UPPERCASE_LETTER && t <= U_OTHER_LETTER) || (t >= U_DECIMAL_DIGIT_NUMBER && t <= U_OTHER_NUMBER) ||
         u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

// Python's str.islower / isupper: some cased character, and none of the other case.
bool py_islower(const std::string& s, bool upper) {
  bool cased = false;
  for (char32_t c : to_u32(s)) {
    const bool up = u_isUUppercase(static_cast<UChar32>(c)) || u_istitle(static_cast<UChar32>(c));
    const bool low = u_isULowercase(static_cast<UChar32>(c));
    if (upper ? (low || u_istitle(static_cast<UChar32>(c))) : up) return false;
    if (upper ? up : low) cased = true;
  }
  return cased;
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = to_u32(s);
  if (u.empty()) return {};
  return title_char(u[0]) + to_lower(to_utf8(std::u32string_view(u).substr(1)));
}

// Python's str.title(): a cased character after an uncased one is title-cased, the rest lower-cased.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : to_u32(s)) {
    std::string one;
    append_utf8(one, c);
    out += prev_cased ? to_lower(one) : title_char(c);
    prev_cased = is_cased(c);
  }
  return out;
}

// Python's float(str): optional whitespace, sign, digits with single underscores, inf, nan.
bool parse_py_float(const std::string& text, double& out) {
  std::string s = strip(text, nullptr, true, true);
  std::string clean;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) clean.push_back(s[i++]);
  std::string rest = s.substr(i);
  std::string lower;
  for (char c : rest) lower.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
  if (lower == "inf" || lower == "infinity" || lower == "nan") {
    out = lower == "nan" ? NAN : INFINITY;
    if (clean == "-") out = -out;
    return true;
  }
  bool digits = false, dot = false, exp = false;
  char prev = 0;
  for (size_t k = 0; k < rest.size(); ++k) {
    const char c = rest[k];
    if (c >= '0' && c <= '9') {
      digits = true;
      clean.push_back(c);
    } else if (c == '_') {
      if (!(prev >= '0' && prev <= '9') || k + 1 >= rest.size() || !(rest[k + 1] >= '0' && rest[k + 1] <= '9'))
        return false;
    } else if (c == '.' && !dot && !exp) {
      dot = true;
      clean.push_back(c);
    } else if ((c == 'e' || c == 'E') && digits && !exp) {
      exp = true;
      digits = false;
      clean.push_back('e');
      if (k + 1 < rest.size() && (rest[k + 1] == '+' || rest[k + 1] == '-')) clean.push_back(rest[++k]);
    } else {
      return false;
    }
    prev = c;
  }
  if (!digits) return false;
  out = std::strtod(clean.c_str(), nullptr);
  return true;
}

// Python's int(str, base): whitespace, sign, digits of the base with single underscores (base 0: prefixes).
bool parse_py_int(const std::string& text, int64_t base, int64_t& out) {
  std::string s = strip(text, nullptr, true, true);
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (i + 1 < s.size() && s[i] == '0') {
      const char p = static_cast<char>(s[i + 1] | 0x20);
      const int64_t b = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (b && (base == 0 || base == b)) {
        base = b;
        i += 2;
        if (i < s.size() && s[i] == '_') ++i;
      }
    }
    if (base == 0) base = 10;
  }
  if (i >= s.size()) return false;
  int64_t v = 0;
  char prev = '_';
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (prev == '_' || i + 1 >= s.size()) return false;
      prev = c;
      continue;
    }
    const char l = static_cast<char>(c | 0x20);
    const int64_t d = c >= '0' && c <= '9' ? c - '0' : l >= 'a' && l <= 'z' ? l - 'a' + 10 : 99;
    if (d >= base) return false;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v))
      raise("integer overflow (past int64): Python's unbounded integers are not supported");
    prev = c;
  }
  out = neg ? -v : v;
  return true;
}

// Python's round(x, n) for a float: correctly rounded, ties to even (glibc's printf rounds so).
double py_round(double x, int64_t n) {
  if (!std::isfinite(x) || n > 320) return x;
  if (n < 0) raise("round() with a negative precision is not supported");
  std::vector<char> buf(static_cast<size_t>(n) + 400);
  std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(n), x);
  return std::strtod(buf.data(), nullptr);
}

// Jinja2's ignore_case: strings compare lower-cased unless case_sensitive.
Value ignore_case(const Value& v) { return v.kind == Kind::String ? Value::string(to_lower(*v.s)) : v; }

}  // namespace

// --- Python string algorithms

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep && sep->empty()) raise("empty separator");
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (!from_right) {
      size_t start = 0;
      for (size_t at; maxsplit > 0 && (at = s.find(*sep, start)) != std::string::npos; --maxsplit) {
        parts.push_back(s.substr(start, at - start));
        start = at + sep->size();
      }
      parts.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      for (; maxsplit > 0 && end >= sep->size(); --maxsplit) {
        size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string::npos) break;
        parts.push_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
      }
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // No separator: runs of whitespace split, and none is kept at the ends.
  std::u32string u = to_u32(s);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < u.size() && is_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit == 0) {
        size_t e = u.size();
        while (e > i && is_space(u[e - 1])) --e;
        parts.push_back(to_utf8(std::u32string_view(u).substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < u.size() && !is_space(u[j])) ++j;
      parts.push_back(to_utf8(std::u32string_view(u).substr(i, j - i)));
      --maxsplit;
      i = j;
    }
  } else {
    size_t e = u.size();
    while (true) {
      while (e > 0 && is_space(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit == 0) {
        size_t b = 0;
        while (b < e && is_space(u[b])) ++b;
        parts.push_back(to_utf8(std::u32string_view(u).substr(b, e - b)));
        break;
      }
      size_t b = e;
      while (b > 0 && !is_space(u[b - 1])) --b;
      parts.push_back(to_utf8(std::u32string_view(u).substr(b, e - b)));
      --maxsplit;
      e = b;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> lines;
  std::u32string u = to_u32(s);
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    if (!is_line_break(u[i])) continue;
    size_t end = i + 1;
    if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') end = i + 2;
    lines.push_back(to_utf8(std::u32string_view(u).substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < u.size()) lines.push_back(to_utf8(std::u32string_view(u).substr(start)));
  return lines;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old.empty()) {  // the replacement goes before every character and at the end
    std::u32string u = to_u32(s);
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count > 0) {
        out += repl;
        --count;
      }
      if (i < u.size()) append_utf8(out, u[i]);
    }
    return out;
  }
  size_t start = 0;
  for (size_t at; count > 0 && (at = s.find(old, start)) != std::string::npos; --count) {
    out.append(s, start, at - start);
    out += repl;
    start = at + old.size();
  }
  out.append(s, start, std::string::npos);
  return out;
}

// --- filters

namespace {

// Jinja2's make_attrgetter: "a.b.0" looked up part by part with getitem.
Value attr_path(Interpreter& in, const Value& item, const Value& attribute, const Value* fallback) {
  Value v = item;
  if (attribute.kind == Kind::String) {
    const std::string& path = *attribute.s;
    for (size_t start = 0;;) {
      const size_t dot = path.find('.', start);
      const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool digits =
          !part.empty() && part.size() < 19 && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      v = in.get_item(v, digits ? Value::integer(std::strtoll(part.c_str(), nullptr, 10)) : Value::string(part));
      if (fallback && v.is_undefined()) v = *fallback;  // the default stands in at each step
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  } else {
    v = in.get_item(v, attribute);
  }
  if (fallback && v.is_undefined()) return *fallback;
  return v;
}

}  // namespace

Value Interpreter::filter(int id, const Value& subject, ValueList pos, Kwargs kw) {
  const std::string name = filter_name(id);
  Args a(name, std::move(pos), std::move(kw));
  const Value& v = subject;
  auto text = [&] { return py_str(v); };

  if (name == "abs") {
    a.check(0, {});
    if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
    if (is_int(v)) {
      if (v.as_int() == INT64_MIN) raise("integer overflow (past int64)");
      return Value::integer(std::llabs(v.as_int()));
    }
    if (v.is_undefined()) raise_undefined(v);
    raise(std::string("bad operand type for abs(): '") + type_name(v) + "'");
  }
  if (name == "attr") {
    a.check(1, {"name"});
    const Value* n = a.get(0, "name");
    if (!n) raise("attr() needs the attribute's name");
    const std::string attr = py_str(*n);
    if (v.kind == Kind::Dict) {  // getattr only: a dict's keys are not its attributes
      if (has_method(v, attr)) return get_attr(v, attr);
      return Value::undefined("'dict object' has no attribute '" + attr + "'");
    }
    return get_attr(v, attr);
  }
  if (name == "batch") {
    a.check(2, {"linecount", "fill_with"});
    const Value* count = a.get(0, "linecount");
    if (!count) raise("batch() needs the line count");
    const int64_t n = need_int(*count, "batch");
    if (n <= 0) raise("batch() needs a positive line count");
    const Value* fill = a.get(1, "fill_with");
    ValueList rows, row;
    for (Value& item : iterate(v)) {
      row.push_back(std::move(item));
      if (static_cast<int64_t>(row.size()) == n) {
        rows.push_back(list(std::move(row)));
        row.clear();
      }
    }
    if (!row.empty()) {
      if (fill && fill->kind != Kind::None)
        while (static_cast<int64_t>(row.size()) < n) row.push_back(*fill);
      rows.push_back(list(std::move(row)));
    }
    return list(std::move(rows), Origin::Generator);
  }
  if (name == "capitalize") {
    a.check(0, {});
    return string(py_capitalize(text()));
  }
  if (name == "center") {
    a.check(1, {"width"});
    return call_method(Value::string(text()), "center", {a.get_or(0, "width", Value::integer(80))}, {});
  }
  if (name == "count" || name == "length") {
    a.check(0, {});
    switch (v.kind) {
      case Kind::Undefined: return Value::integer(0);
      case Kind::String:
        step(v.s->size() / 64);
        return Value::integer(static_cast<int64_t>(code_points(*v.s)));
      case Kind::List:
      case Kind::Tuple:
        if (v.origin == Origin::Generator) raise("object of type 'generator' has no len()");
        return Value::integer(static_cast<int64_t>(v.l->size()));
      case Kind::Dict: return Value::integer(static_cast<int64_t>(v.d->items.size()));
      default: raise(std::string("object of type '") + type_name(v) + "' has no len()");
    }
  }
  if (name == "d" || name == "default") {
    a.check(2, {"default_value", "boolean"});
    const Value fallback = a.get_or(0, "default_value", Value::string(""));
    const bool boolean = truthy(a.get_or(1, "boolean", Value::boolean(false)));
    if (v.is_undefined() || (boolean && !truthy(v))) return fallback;
    return v;
  }
  if (name == "dictsort") {
    a.check(3, {"case_sensitive", "by", "reverse"});
    if (v.kind != Kind::Dict) raise(std::string("dictsort needs a dict, not ") + type_name(v));
    const bool cs = truthy(a.get_or(0, "case_sensitive", Value::boolean(false)));
    const Value by = a.get_or(1, "by", Value::string("key"));
    const bool rev = truthy(a.get_or(2, "reverse", Value::boolean(false)));
    size_t pos;
    if (by.kind == Kind::String && *by.s == "key")
      pos = 0;
    else if (by.kind == Kind::String && *by.s == "value")
      pos = 1;
    else
      raise("You can only sort by either \"key\" or \"value\"");
    ValueList items;
    for (const auto& [k, e] : v.d->items) items.push_back(Value::list({k, e}, true));
    step(items.size());
    auto key = [&](const Value& item) { return cs ? (*item.l)[pos] : ignore_case((*item.l)[pos]); };
    std::stable_sort(items.begin(), items.end(),
                     [&](const Value& x, const Value& y) { return rev ? less(key(y), key(x)) : less(key(x), key(y)); });
    return list(std::move(items));
  }
  if (name == "e" || name == "escape" || name == "forceescape") {
    a.check(0, {});
    if (v.kind == Kind::String && v.b && name != "forceescape") return v;
    Value r = string(html_escape_text(text()));
    r.b = true;
    return r;
  }
  if (name == "first" || name == "last") {
    a.check(0, {});
    if (v.kind == Kind::List && v.origin == Origin::Generator && name == "last")
      raise("'generator' object is not reversible");
    ValueList items = iterate(v);
    if (items.empty()) return Value::undefined(std::string("No ") + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "float") {
    a.check(1, {"default"});
    const Value fallback = a.get_or(0, "default", Value::number(0.0));
    if (v.kind == Kind::Float) return v;
    if (is_int(v)) return Value::number(static_cast<double>(v.as_int()));
    double d;
    if (v.kind == Kind::String && parse_py_float(*v.s, d)) return Value::number(d);
    return fallback;
  }
  if (name == "int") {
    a.check(2, {"default", "base"});
    const Value fallback = a.get_or(0, "default", Value::integer(0));
    const int64_t base = need_int(a.get_or(1, "base", Value::integer(10)), "int base");
    if (base != 0 && (base < 2 || base > 36)) raise("int() base must be >= 2 and <= 36, or 0");
    if (is_int(v)) return Value::integer(v.as_int());
    double d = 0;
    if (v.kind == Kind::String) {
      int64_t i;
      if (parse_py_int(*v.s, base, i)) return Value::integer(i);
      if (!parse_py_float(*v.s, d)) return fallback;
    } else if (v.kind == Kind::Float) {
      d = v.f;
    } else {
      return fallback;
    }
    if (std::isnan(d)) return fallback;
    if (std::isinf(d)) raise("cannot convert float infinity to integer");
    if (d >= 9223372036854775808.0 || d < -9223372036854775808.0)
      raise("integer overflow (past int64): Python's unbounded integers are not supported");
    return Value::integer(static_cast<int64_t>(std::trunc(d)));
  }
  if (name == "indent") {
    a.check(3, {"width", "first", "blank"});
    const Value width = a.get_or(0, "width", Value::integer(4));
    const bool first = truthy(a.get_or(1, "first", Value::boolean(false)));
    const bool blank = truthy(a.get_or(2, "blank", Value::boolean(false)));
    std::string pad;
    if (width.kind == Kind::String) {
      pad = *width.s;
    } else {
      const int64_t w = need_int(width, "indent width");
      check_size(static_cast<uint64_t>(std::max<int64_t>(0, w)));
      pad = std::string(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
    }
    // Jinja2 appends a newline first so that splitlines keeps a trailing empty line.
    std::vector<std::string> lines = py_splitlines(text() + "\n", false);
    std::string rv;
    if (blank) {
      for (size_t k = 0; k < lines.size(); ++k) {
        if (k) rv += "\n" + pad;
        rv += lines[k];
        check_size(rv.size());
      }
    } else {
      rv = lines.empty() ? std::string() : lines[0];
      for (size_t k = 1; k < lines.size(); ++k) {
        rv += "\n";
        if (!lines[k].empty()) rv += pad;
        rv += lines[k];
        check_size(rv.size());
      }
    }
    if (first) rv = pad + rv;
    return string(std::move(rv));
  }
  if (name == "join") {
    a.check(2, {"d", "attribute"});
    const Value sep = a.get_or(0, "d", Value::string(""));
    const Value* attribute = a.get(1, "attribute");
    const std::string s = py_str(sep);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += s;
      first = false;
      out += py_str(attribute ? attr_path(*this, item, *attribute, nullptr) : item);
      check_size(out.size());
    }
    return string(std::move(out));
  }
  if (name == "list") {
    a.check(0, {});
    return list(iterate(v));
  }
  if (name == "lower" || name == "upper") {
    a.check(0, {});
    return string(name == "lower" ? to_lower(text()) : to_upper(text()));
  }
  if (name == "items") {
    a.check(0, {});
    if (v.is_undefined()) return list({}, Origin::Generator);
    if (v.kind != Kind::Dict) raise("Can only get item pairs from a mapping.");
    ValueList items;
    for (const auto& [k, e] : v.d->items) items.push_back(Value::list({k, e}, true));
    return list(std::move(items), Origin::Generator);
  }
  if (name == "map") {
    ValueList out;
    if (a.positional().empty()) {
      Value attribute, fallback;
      bool has_attribute = false, has_default = false;
      for (const auto& [k, e] : a.keywords()) {
        if (k == "attribute") {
          attribute = e;
          has_attribute = true;
        } else if (k == "default") {
          fallback = e;
          has_default = fallback.kind != Kind::None;
        } else {
          raise("Unexpected keyword argument '" + k + "'");
        }
      }
      if (!has_attribute) raise("map() needs a filter name or attribute=");
      for (const Value& item : iterate(v)) {
        step();
        out.push_back(attr_path(*this, item, attribute, has_default ? &fallback : nullptr));
      }
    } else {
      const Value& fname = a.positional()[0];
      const int fid = fname.kind == Kind::String ? filter_id(*fname.s) : -1;
      if (fid < 0) raise("No filter named " + py_repr(fname) + ".");
      if (filter_id("map") == fid) raise("map('map') is not supported");
      ValueList rest(a.positional().begin() + 1, a.positional().end());
      for (const Value& item : iterate(v)) {
        step();
        out.push_back(filter(fid, item, rest, a.keywords()));
      }
    }
    return list(std::move(out), Origin::Generator);
  }
  if (name == "min" || name == "max") {
    a.check(2, {"case_sensitive", "attribute"});
    const bool cs = truthy(a.get_or(0, "case_sensitive", Value::boolean(false)));
    const Value* attribute = a.get(1, "attribute");
    ValueList items = iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    auto key = [&](const Value& item) {
      Value k = attribute && attribute->kind != Kind::None ? attr_path(*this, item, *attribute, nullptr) : item;
      return cs ? k : ignore_case(k);
    };
    size_t best = 0;
    Value best_key = key(items[0]);
    for (size_t k = 1; k < items.size(); ++k) {
      step();
      Value kk = key(items[k]);
      if (name == "min" ? less(kk, best_key) : less(best_key, kk)) {
        best = k;
        best_key = kk;
      }
    }
    return items[best];
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep = name == "select" || name == "selectattr";
    const ValueList& p = a.positional();
    size_t off = 0;
    Value attribute;
    if (by_attr) {
      if (p.empty()) raise(name + "() needs an attribute name");
      attribute = p[0];
      off = 1;
    }
    int tid = -1;
    ValueList targs;
    if (p.size() > off) {
      if (p[off].kind != Kind::String || (tid = test_id(*p[off].s)) < 0) raise("No test named " + py_repr(p[off]) + ".");
      targs.assign(p.begin() + static_cast<std::ptrdiff_t>(off + 1), p.end());
    }
    ValueList out;
    for (const Value& item : iterate(v)) {
      step();
      Value subject_value = by_attr ? attr_path(*this, item, attribute, nullptr) : item;
      const bool passed = tid < 0 ? truthy(subject_value) : test(tid, subject_value, targs, a.keywords());
      if (passed == keep) out.push_back(item);
    }
    return list(std::move(out), Origin::Generator);
  }
  if (name == "replace") {
    a.check(3, {"old", "new", "count"});
    const Value* old = a.get(0, "old");
    const Value* repl = a.get(1, "new");
    if (!old || !repl) raise("replace() needs the old and the new text");
    const Value count = a.get_or(2, "count", Value::none());
    const int64_t n = count.kind == Kind::None ? -1 : need_int(count, "replace count");
    const std::string s = text(), o = py_str(*old), r = py_str(*repl);
    // Bound the result before building it: each replacement adds at most r.size() bytes.
    const uint64_t hits = o.empty() ? code_points(s) + 1 : s.size() / o.size();
    check_size(s.size() + std::min<uint64_t>(hits, n < 0 ? UINT64_MAX : static_cast<uint64_t>(n)) * r.size());
    return string(py_replace(s, o, r, n));
  }
  if (name == "reverse") {
    a.check(0, {});
    if (v.kind == Kind::String) {
      std::u32string u = to_u32(*v.s);
      std::reverse(u.begin(), u.end());
      return string(to_utf8(u));
    }
    if (v.kind == Kind::List && v.origin == Origin::Generator) raise("'generator' object is not reversible");
    ValueList items = iterate(v);
    std::reverse(items.begin(), items.end());
    return list(std::move(items), Origin::Generator);
  }
  if (name == "round") {
    a.check(2, {"precision", "method"});
    const int64_t precision = need_int(a.get_or(0, "precision", Value::integer(0)), "round precision");
    const Value method = a.get_or(1, "method", Value::string("common"));
    const std::string m = method.kind == Kind::String ? *method.s : "";
    if (m != "common" && m != "ceil" && m != "floor") raise("method must be common, ceil or floor");
    if (!v.is_number()) {
      if (v.is_undefined()) raise_undefined(v);
      raise(std::string("type ") + type_name(v) + " doesn't define __round__ method");
    }
    if (m == "common") {
      if (is_int(v)) return Value::integer(v.as_int());
      return Value::number(py_round(v.f, precision));
    }
    if (precision < 0 || precision > 300) raise("round() precision out of the supported range 0..300");
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.as_double() * scale;
    return Value::number((m == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
  }
  if (name == "safe") {
    a.check(0, {});
    if (v.kind == Kind::String && v.b) return v;
    Value r = string(text());
    r.b = true;
    return r;
  }
  if (name == "sort" || name == "unique") {
    const bool sort = name == "sort";
    if (sort)
      a.check(3, {"reverse", "case_sensitive", "attribute"});
    else
      a.check(2, {"case_sensitive", "attribute"});
    const bool rev = sort && truthy(a.get_or(0, "reverse", Value::boolean(false)));
    const bool cs = truthy(a.get_or(sort ? 1 : 0, "case_sensitive", Value::boolean(false)));
    const Value* attribute = a.get(sort ? 2 : 1, "attribute");
    ValueList items = iterate(v);
    step(items.size());
    auto key = [&](const Value& item) {
      Value k = attribute && attribute->kind != Kind::None ? attr_path(*this, item, *attribute, nullptr) : item;
      return cs ? k : ignore_case(k);
    };
    if (sort) {
      std::vector<std::pair<Value, Value>> keyed;
      for (Value& item : items) keyed.emplace_back(key(item), std::move(item));
      std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        return rev ? less(y.first, x.first) : less(x.first, y.first);
      });
      ValueList out;
      for (auto& kv : keyed) out.push_back(std::move(kv.second));
      return list(std::move(out));
    }
    ValueList out, seen;
    for (Value& item : items) {
      Value k = key(item);
      if (k.kind == Kind::List || k.kind == Kind::Dict) raise(std::string("unhashable type: '") + type_name(k) + "'");
      step(seen.size() / 16);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
        seen.push_back(std::move(k));
        out.push_back(std::move(item));
      }
    }
    return list(std::move(out), Origin::Generator);
  }
  if (name == "string") {
    a.check(0, {});
    if (v.kind == Kind::String) return v;
    return string(text());
  }
  if (name == "sum") {
    a.check(2, {"attribute", "start"});
    const Value* attribute = a.get(0, "attribute");
    Value total = a.get_or(1, "start", Value::integer(0));
    for (const Value& item : iterate(v)) {
      step();
      total = binary(ExprType::Add, total,
                     attribute && attribute->kind != Kind::None ? attr_path(*this, item, *attribute, nullptr) : item);
    }
    return total;
  }
  if (name == "title") {
    a.check(0, {});
    // Jinja2's own title: split at runs of - whitespace ( { [ <, then first letter up, the rest down.
    std::u32string u = to_u32(text());
    auto delim = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_space(c); };
    std::string out;
    for (size_t i = 0; i < u.size();) {
      size_t j = i;
      const bool d = delim(u[i]);
      while (j < u.size() && delim(u[j]) == d) ++j;
      std::string first;
      append_utf8(first, u[i]);
      out += to_upper(first) + to_lower(to_utf8(std::u32string_view(u).substr(i + 1, j - i - 1)));
      i = j;
    }
    return string(std::move(out));
  }
  if (name == "trim") {
    a.check(1, {"chars"});
    const Value chars = a.get_or(0, "chars", Value::none());
    if (chars.kind != Kind::None && chars.kind != Kind::String) raise("strip arg must be None or str");
    return string(strip(text(), chars.kind == Kind::String ? chars.s.get() : nullptr, true, true));
  }
  if (name == "wordcount") {
    a.check(0, {});
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : to_u32(text())) {
      const bool w = is_word_char(c);
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "tojson") {
    // transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    a.check(4, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonOptions o;
    o.ensure_ascii = truthy(a.get_or(0, "ensure_ascii", Value::boolean(false)));
    const Value indent = a.get_or(1, "indent", Value::none());
    if (indent.kind == Kind::String) {
      o.indented = true;
      o.indent = *indent.s;
    } else if (is_int(indent)) {
      o.indented = true;
      const int64_t n = indent.as_int();
      check_size(static_cast<uint64_t>(std::max<int64_t>(0, n)));
      o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
    } else if (indent.kind != Kind::None) {
      raise("tojson indent must be an int, a str or None, not " + std::string(type_name(indent)));
    }
    if (o.indented) o.item_sep = ",";
    const Value seps = a.get_or(2, "separators", Value::none());
    if (seps.kind != Kind::None) {
      if (!seps.is_sequence() || seps.l->size() != 2 || (*seps.l)[0].kind != Kind::String ||
          (*seps.l)[1].kind != Kind::String)
        raise("tojson separators must be a pair of strings");
      o.item_sep = *(*seps.l)[0].s;
      o.key_sep = *(*seps.l)[1].s;
    }
    o.sort_keys = truthy(a.get_or(3, "sort_keys", Value::boolean(false)));
    std::string json = to_json(v, o);
    return string(std::move(json));
  }
  raise("the filter '" + name + "' is not supported");
}

// --- tests

bool Interpreter::test(int id, const Value& v, ValueList pos, Kwargs kw) {
  const std::string name = test_name(id);
  Args a(name, std::move(pos), std::move(kw));
  auto arg = [&](const char* what) -> const Value& {
    a.check(1, {});
    const Value* x = a.get(0, what);
    if (!x) raise("the test '" + name + "' needs an argument");
    return *x;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == Kind::None;
  if (name == "boolean") return v.kind == Kind::Bool;
  if (name == "false") return v.kind == Kind::Bool && !v.b;
  if (name == "true") return v.kind == Kind::Bool && v.b;
  if (name == "integer") return v.kind == Kind::Int;
  if (name == "float") return v.kind == Kind::Float;
  if (name == "number") return v.is_number();
  if (name == "string") return v.kind == Kind::String;
  if (name == "mapping") return v.kind == Kind::Dict;
  if (name == "sequence")
    return v.kind == Kind::String || v.kind == Kind::Tuple || v.kind == Kind::Dict || v.is_undefined() ||
           (v.kind == Kind::List && (v.origin == Origin::Plain || v.origin == Origin::Range));
  if (name == "iterable")
    return v.kind == Kind::String || v.is_sequence() || v.kind == Kind::Dict || v.is_undefined() ||
           (v.kind == Kind::Object && v.o->type == Object::Type::Loop);
  if (name == "callable")
    return v.is_undefined() || (v.kind == Kind::Object && v.o->type != Object::Type::Namespace);
  if (name == "lower" || name == "upper") return py_islower(py_str(v), name == "upper");
  if (name == "odd" || name == "even") {
    const Value r = binary(ExprType::Mod, v, Value::integer(2));
    return equals(r, Value::integer(name == "odd" ? 1 : 0));
  }
  if (name == "divisibleby") return equals(binary(ExprType::Mod, v, arg("num")), Value::integer(0));
  if (name == "in") return contains(arg("seq"), v);
  if (name == "sameas") {
    const Value& other = arg("other");
    if (v.kind == Kind::None || v.kind == Kind::Bool || other.kind == Kind::None || other.kind == Kind::Bool)
      return v.kind == other.kind && (v.kind == Kind::None || v.b == other.b);
    if (v.kind == Kind::Object && other.kind == Kind::Object) return v.o == other.o;
    raise("'sameas' is only supported against none, true, false and objects (Python's identity of other values)");
  }
  if (name == "filter") return v.kind == Kind::String && filter_id(*v.s) >= 0;
  if (name == "test") return v.kind == Kind::String && test_id(*v.s) >= 0;
  if (name == "==" || name == "eq" || name == "equalto") return compare(CmpOp::Eq, v, arg("other"));
  if (name == "!=" || name == "ne") return compare(CmpOp::Ne, v, arg("other"));
  if (name == ">" || name == "gt" || name == "greaterthan") return compare(CmpOp::Gt, v, arg("other"));
  if (name == ">=" || name == "ge") return compare(CmpOp::Ge, v, arg("other"));
  if (name == "<" || name == "lt" || name == "lessthan") return compare(CmpOp::Lt, v, arg("other"));
  if (name == "<=" || name == "le") return compare(CmpOp::Le, v, arg("other"));
  raise("the test '" + name + "' is not supported");
}

// --- global functions and methods

Value Interpreter::call_builtin(const CallableObject& f, ValueList pos, Kwargs kw) {
  using Fn = CallableObject::Fn;
  switch (f.fn) {
    case Fn::Method: return call_method(f.self, f.method, std::move(pos), std::move(kw));
    case Fn::RaiseException: {
      Args a("raise_exception", std::move(pos), std::move(kw));
      a.check(1, {"message"});
      const Value* m = a.get(0, "message");
      if (!m) raise("raise_exception() missing 1 required positional argument: 'message'");
      raise(py_str(*m));
    }
    case Fn::StrftimeNow: {
      Args a("strftime_now", std::move(pos), std::move(kw));
      a.check(1, {"format"});
      const Value* fmt = a.get(0, "format");
      if (!fmt) raise("strftime_now() missing 1 required positional argument: 'format'");
      const std::string& format = need_str(*fmt, "strftime format");
      check_size(format.size() * 64);
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      // strftime returns 0 both for "too small" and for an empty result: mark the end to tell them apart.
      std::vector<char> buf(format.size() * 64 + 64);
      const size_t n = std::strftime(buf.data(), buf.size(), (format + "\x01").c_str(), &tm);
      if (n == 0) raise("strftime_now: the formatted time is too long");
      std::string out(buf.data(), n - 1);
      if (!valid_utf8(out)) raise("strftime_now: the formatted time is not valid UTF-8");
      return string(std::move(out));
    }
    case Fn::Range: {
      if (!kw.empty()) raise("range() takes no keyword arguments");
      if (pos.empty() || pos.size() > 3)
        raise("range expected at most 3 arguments, got " + std::to_string(pos.size()));
      for (const Value& p : pos)
        if (!is_int(p)) raise(std::string("'") + type_name(p) + "' object cannot be interpreted as an integer");
      int64_t start = 0, stop, stride = 1;
      if (pos.size() == 1) {
        stop = pos[0].as_int();
      } else {
        start = pos[0].as_int();
        stop = pos[1].as_int();
        if (pos.size() == 3) stride = pos[2].as_int();
      }
      if (stride == 0) raise("range() arg 3 must not be zero");
      // Count in 128 bits: start, stop and step may be anywhere in int64.
      const __int128 span = stride > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
      const __int128 step_abs = stride > 0 ? stride : -static_cast<__int128>(stride);
      const __int128 count = span <= 0 ? 0 : (span + step_abs - 1) / step_abs;
      if (count > static_cast<__int128>(limits_.max_range))
        raise("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(limits_.max_range) +
              ").");
      ValueList items;
      for (__int128 k = 0; k < count; ++k) items.push_back(Value::integer(static_cast<int64_t>(start + k * stride)));
      Value r = list(std::move(items), Origin::Range);
      r.s = std::make_shared<const std::string>("range(" + std::to_string(start) + ", " + std::to_string(stop) +
                                                (stride != 1 ? ", " + std::to_string(stride) : "") + ")");
      return r;
    }
    case Fn::Namespace:
    case Fn::Dict: {
      const char* what = f.fn == Fn::Dict ? "dict" : "namespace";
      if (pos.size() > 1) raise(std::string(what) + " expected at most 1 argument, got " + std::to_string(pos.size()));
      Dict d;
      if (!pos.empty()) {
        const Value& init = pos[0];
        if (init.kind == Kind::Dict) {
          d = *init.d;
        } else {
          for (const Value& pair : iterate(init)) {
            ValueList kv = iterate(pair);
            if (kv.size() != 2)
              raise("dictionary update sequence element has length " + std::to_string(kv.size()) + "; 2 is required");
            d.set(kv[0], kv[1]);
          }
        }
      }
      for (auto& [k, v] : kw) d.set(Value::string(k), std::move(v));
      if (f.fn == Fn::Dict) return Value::dict(std::move(d));
      auto ns = std::make_shared<NamespaceObject>();
      ns->attrs = std::move(d);
      if (namespaces_.size() >= 64 && namespaces_.size() == namespaces_.capacity())  // drop the freed ones
        std::erase_if(namespaces_, [](const auto& w) { return w.expired(); });
      namespaces_.push_back(ns);
      return Value::object(std::move(ns));
    }
    case Fn::LoopCycle: {
      if (pos.empty()) raise("no items for cycling given");
      return pos[f.loop->index0 % pos.size()];
    }
    case Fn::LoopChanged: {
      Value now = Value::list(std::move(pos));
      if (f.loop->changed_seen && equals(now, f.loop->last_changed)) return Value::boolean(false);
      f.loop->changed_seen = true;
      f.loop->last_changed = now;
      return Value::boolean(true);
    }
  }
  raise("internal error: unknown builtin");
}

Value Interpreter::call_method(const Value& self, const std::string& m, ValueList pos, Kwargs kw) {
  step(self.kind == Kind::String ? self.s->size() / 64 : 0);  // a string method reads the whole string
  const std::string what = std::string(type_name(self)) + "." + m;
  Args a(what, std::move(pos), std::move(kw));
  if (self.kind == Kind::String) {
    const std::string& s = *self.s;
    if (m == "startswith" || m == "endswith") {
      a.check(1, {});
      const Value* p = a.get(0, "prefix");
      if (!p) raise(what + "() takes at least 1 argument (0 given)");
      ValueList options = p->kind == Kind::Tuple ? *p->l : ValueList{*p};
      for (const Value& o : options) {
        if (o.kind != Kind::String)
          raise(m + " first arg must be str or a tuple of str, not " + type_name(o));
        const std::string& x = *o.s;
        if (m == "startswith" ? s.compare(0, x.size(), x) == 0
                              : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
          return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (m == "split" || m == "rsplit") {
      a.check(2, {"sep", "maxsplit"});
      const Value sep = a.get_or(0, "sep", Value::none());
      if (sep.kind != Kind::None && sep.kind != Kind::String) raise("must be str or None, not " + std::string(type_name(sep)));
      const int64_t maxsplit = need_int(a.get_or(1, "maxsplit", Value::integer(-1)), "maxsplit");
      ValueList parts;
      for (std::string& p : py_split(s, sep.kind == Kind::String ? sep.s.get() : nullptr, maxsplit, m == "rsplit"))
        parts.push_back(Value::string(std::move(p)));
      return list(std::move(parts));
    }
    if (m == "splitlines") {
      a.check(1, {"keepends"});
      ValueList parts;
      for (std::string& p : py_splitlines(s, truthy(a.get_or(0, "keepends", Value::boolean(false)))))
        parts.push_back(Value::string(std::move(p)));
      return list(std::move(parts));
    }
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      a.check(1, {});
      const Value chars = a.get_or(0, "chars", Value::none());
      if (chars.kind != Kind::None && chars.kind != Kind::String) raise(m + " arg must be None or str");
      return Value::string(strip(s, chars.kind == Kind::String ? chars.s.get() : nullptr, m != "rstrip", m != "lstrip"));
    }
    if (m == "upper" || m == "lower" || m == "title" || m == "capitalize" || m == "swapcase") {
      a.check(0, {});
      if (m == "upper") return string(to_upper(s));
      if (m == "lower") return string(to_lower(s));
      if (m == "title") return string(py_title(s));
      if (m == "capitalize") return string(py_capitalize(s));
      std::string out;
      for (char32_t c : to_u32(s)) {
        std::string one;
        append_utf8(one, c);
        out += u_isULowercase(static_cast<UChar32>(c)) ? to_upper(one)
               : u_isUUppercase(static_cast<UChar32>(c)) ? to_lower(one)
                                                          : one;
      }
      return string(std::move(out));
    }
    if (m == "replace") {
      a.check(3, {});
      const Value* old = a.get(0, "old");
      const Value* repl = a.get(1, "new");
      if (!old || !repl) raise(what + "() takes at least 2 arguments");
      const std::string& o = need_str(*old, "replace() argument 1");
      const std::string& r = need_str(*repl, "replace() argument 2");
      const int64_t n = need_int(a.get_or(2, "count", Value::integer(-1)), "replace count");
      const uint64_t hits = o.empty() ? code_points(s) + 1 : s.size() / o.size();
      check_size(s.size() + std::min<uint64_t>(hits, n < 0 ? UINT64_MAX : static_cast<uint64_t>(n)) * r.size());
      return string(py_replace(s, o, r, n));
    }
    if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
      a.check(1, {});
      const Value* sub = a.get(0, "sub");
      if (!sub) raise(what + "() takes at least 1 argument (0 given)");
      const std::string& x = need_str(*sub, m + "() argument");
      if (m == "count") {
        if (x.empty()) return Value::integer(static_cast<int64_t>(code_points(s)) + 1);
        int64_t n = 0;
        for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
        return Value::integer(n);
      }
      const int64_t i = cp_index(s, m[0] == 'r' ? s.rfind(x) : s.find(x));
      if (i < 0 && (m == "index" || m == "rindex")) raise("substring not found");
      return Value::integer(i);
    }
    if (m == "join") {
      a.check(1, {});
      const Value* items = a.get(0, "iterable");
      if (!items) raise("str.join() takes exactly one argument (0 given)");
      std::string out;
      size_t k = 0;
      for (const Value& item : iterate(*items)) {
        if (item.kind != Kind::String)
          raise("sequence item " + std::to_string(k) + ": expected str instance, " + type_name(item) + " found");
        if (k++) out += s;
        out += *item.s;
        check_size(out.size());
      }
      return string(std::move(out));
    }
    if (m == "removeprefix" || m == "removesuffix") {
      a.check(1, {});
      const Value* x = a.get(0, "affix");
      if (!x) raise(what + "() takes exactly one argument (0 given)");
      const std::string& af = need_str(*x, m + "() argument");
      if (m == "removeprefix") return Value::string(s.compare(0, af.size(), af) == 0 ? s.substr(af.size()) : s);
      const bool ends = s.size() >= af.size() && s.compare(s.size() - af.size(), af.size(), af) == 0;
      return Value::string(ends ? s.substr(0, s.size() - af.size()) : s);
    }
    if (m == "partition" || m == "rpartition") {
      a.check(1, {});
      const Value* x = a.get(0, "sep");
      if (!x) raise(what + "() takes exactly one argument (0 given)");
      const std::string& sep = need_str(*x, m + "() argument");
      if (sep.empty()) raise("empty separator");
      const size_t at = m == "partition" ? s.find(sep) : s.rfind(sep);
      if (at == std::string::npos)
        return m == "partition" ? Value::list({self, Value::string(""), Value::string("")}, true)
                                : Value::list({Value::string(""), Value::string(""), self}, true);
      return Value::list({Value::string(s.substr(0, at)), *x, Value::string(s.substr(at + sep.size()))}, true);
    }
    if (m == "center" || m == "ljust" || m == "rjust" || m == "zfill") {
      a.check(m == "zfill" ? 1 : 2, {});
      const Value* w = a.get(0, "width");
      if (!w) raise(what + "() takes at least 1 argument (0 given)");
      const int64_t width = need_int(*w, m + " width");
      std::string fill = " ";
      if (const Value* f = a.get(1, "fillchar")) {
        fill = need_str(*f, "the fill character");
        if (code_points(fill) != 1) raise("The fill character must be exactly one character long");
      }
      const int64_t len = static_cast<int64_t>(code_points(s));
      if (width <= len) return self;
      const int64_t marg = width - len;
      check_size(s.size() + static_cast<uint64_t>(marg) * fill.size());
      auto rep = [&](int64_t n) {
        std::string r;
        for (int64_t k = 0; k < n; ++k) r += fill;
        return r;
      };
      if (m == "ljust") return string(s + rep(marg));
      if (m == "rjust") return string(rep(marg) + s);
      if (m == "zfill") {
        const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
        return string((sign ? s.substr(0, 1) : "") + std::string(static_cast<size_t>(marg), '0') + s.substr(sign ? 1 : 0));
      }
      const int64_t left = marg / 2 + (marg & width & 1);
      return string(rep(left) + s + rep(marg - left));
    }
    if (m == "isdigit" || m == "isdecimal" || m == "isnumeric" || m == "isalpha" || m == "isalnum" || m == "isspace" ||
        m == "isupper" || m == "islower") {
      a.check(0, {});
      if (m == "isupper" || m == "islower") return Value::boolean(py_islower(s, m == "isupper"));
      std::u32string u = to_u32(s);
      if (u.empty()) return Value::boolean(false);
      for (char32_t c : u) {
        const auto cp = static_cast<UChar32>(c);
        const int nt = u_getIntPropertyValue(cp, UCHAR_NUMERIC_TYPE);
        const int t = u_charType(cp);
        const bool alpha = t >= U_UPPERCASE_LETTER && t <= U_OTHER_LETTER;
        bool ok;
        if (m == "isdigit")
          ok = nt == U_NT_DECIMAL || nt == U_NT_DIGIT;
        else if (m == "isdecimal")
          ok = nt == U_NT_DECIMAL;
        else if (m == "isnumeric")
          ok = nt != U_NT_NONE;
        else if (m == "isalpha")
          ok = alpha;
        else if (m == "isalnum")
          ok = alpha || nt != U_NT_NONE;
        else
          ok = is_space(c);
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    }
    if (m == "format") {
      // str.format with plain fields: {} {0} {name}, {{ and }}; no format specs.
      std::string out;
      size_t auto_index = 0;
      bool used_auto = false, used_manual = false;
      for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '}') {
          if (i + 1 < s.size() && s[i + 1] == '}') {
            out.push_back('}');
            ++i;
            continue;
          }
          raise("Single '}' encountered in format string");
        }
        if (c != '{') {
          out.push_back(c);
          continue;
        }
        if (i + 1 < s.size() && s[i + 1] == '{') {
          out.push_back('{');
          ++i;
          continue;
        }
        const size_t close = s.find('}', i);
        if (close == std::string::npos) raise("Single '{' encountered in format string");
        std::string field = s.substr(i + 1, close - i - 1);
        char conv = 0;
        if (field.size() >= 2 && field[field.size() - 2] == '!') {
          conv = field.back();
          field.resize(field.size() - 2);
        }
        if (field.find_first_of(":.[{!") != std::string::npos)
          raise("str.format with format specs, conversions other than !r/!s, or attribute access is not supported");
        const Value* arg = nullptr;
        if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
          size_t k;
          if (field.empty()) {
            if (used_manual) raise("cannot switch from manual field specification to automatic field numbering");
            used_auto = true;
            k = auto_index++;
          } else {
            if (used_auto) raise("cannot switch from automatic field numbering to manual field specification");
            used_manual = true;
            k = std::strtoull(field.c_str(), nullptr, 10);
          }
          if (k >= a.positional().size()) raise("Replacement index " + std::to_string(k) + " out of range for positional args tuple");
          arg = &a.positional()[k];
        } else {
          for (const auto& [key, val] : a.keywords())
            if (key == field) arg = &val;
          if (!arg) raise("KeyError: " + py_repr(Value::string(field)));
        }
        if (conv && conv != 'r' && conv != 's') raise("Unknown conversion specifier " + std::string(1, conv));
        out += conv == 'r' ? py_repr(*arg) : py_str(*arg);
        check_size(out.size());
        i = close;
      }
      return string(std::move(out));
    }
  } else if (self.kind == Kind::Dict) {
    if (m == "get") {
      a.check(2, {});
      const Value* key = a.get(0, "key");
      if (!key) raise("get expected at least 1 argument, got 0");
      if (key->kind == Kind::List || key->kind == Kind::Dict)
        raise(std::string("unhashable type: '") + type_name(*key) + "'");
      const Value* found = self.d->find(*key);
      return found ? *found : a.get_or(1, "default", Value::none());
    }
    if (m == "items" || m == "keys" || m == "values") {
      a.check(0, {});
      ValueList out;
      for (const auto& [k, v] : self.d->items)
        out.push_back(m == "items" ? Value::list({k, v}, true) : m == "keys" ? k : v);
      return list(std::move(out), m == "items" ? Origin::DictItems : m == "keys" ? Origin::DictKeys : Origin::DictValues);
    }
    if (m == "copy") {
      a.check(0, {});
      return self;
    }
  } else if (self.is_sequence()) {
    if (m == "count" || m == "index") {
      a.check(1, {});
      const Value* x = a.get(0, "value");
      if (!x) raise(what + "() takes exactly one argument (0 given)");
      int64_t n = 0;
      for (size_t k = 0; k < self.l->size(); ++k) {
        step();
        if (equals((*self.l)[k], *x)) {
          if (m == "index") return Value::integer(static_cast<int64_t>(k));
          ++n;
        }
      }
      if (m == "index") raise(py_repr(*x) + " is not in " + type_name(self));
      return Value::integer(n);
    }
    if (m == "copy" && self.kind == Kind::List) {
      a.check(0, {});
      return self;
    }
  } else if (self.kind == Kind::Float && m == "is_integer") {
    a.check(0, {});
    return Value::boolean(std::isfinite(self.f) && self.f == std::floor(self.f));
  }
  raise("the " + std::string(type_name(self)) + " method '" + m + "' is not supported");
}

}  // namespace mmgpt::jinja
