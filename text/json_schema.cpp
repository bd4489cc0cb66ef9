#include "text/json_schema.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/error.hpp"

namespace mmgpt {

namespace {

using Json = nlohmann::ordered_json;

constexpr size_t kMaxSchemaDepth = 64;
constexpr uint64_t kMaxCount = 4096;
constexpr int64_t kMaxBound = 1000000000000000;  // 10^15
constexpr size_t kMaxRules = 20000;

// The rules every schema's grammar may use.
constexpr const char* kPrimitives = R"(ws ::= | " " | "\n" [ \t]{0,20}
json-char ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
json-string ::= "\"" json-char* "\""
json-int ::= "0" | [1-9] [0-9]{0,15}
json-integer ::= "-"? json-int
json-number ::= "-"? json-int ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws (json-string ws ":" ws json-value ws ("," ws json-string ws ":" ws json-value ws)*)? "}"
json-array ::= "[" ws (json-value ws ("," ws json-value ws)*)? "]"
json-year ::= [1-9] [0-9]{3} | "0" [1-9] [0-9]{2} | "00" [1-9] [0-9] | "000" [1-9]
json-leap-year ::= [0-9]{2} ("0" [48] | [2468] [048] | [13579] [26]) | ("0" [48] | [2468] [048] | [13579] [26]) "00"
json-date ::= json-year "-" ("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | json-year "-" ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | json-year "-02-" ("0" [1-9] | "1" [0-9] | "2" [0-8]) | json-leap-year "-02-29"
json-time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])
json-uuid ::= [0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12}
)";

// Bytes as a GBNF literal.
std::string literal(std::string_view bytes) {
  std::string out = "\"";
  for (char c : bytes) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Integers in [lo, hi], 0 <= lo <= hi, as GBNF alternatives (the usual
// split into runs that share a prefix: 17..42 is 1[7-9] | [2-3][0-9] | 4[0-2]).
void nonnegative_range(int64_t lo, int64_t hi, std::vector<std::string>& out) {
  auto nines = [](int64_t n, int count) {  // n with its last `count` digits set to 9 (99 for 5 and 2)
    std::string s = std::to_string(n);
    s = s.substr(0, s.size() > static_cast<size_t>(count) ? s.size() - static_cast<size_t>(count) : 0) +
        std::string(static_cast<size_t>(count), '9');
    return s.size() > 17 ? INT64_MAX : static_cast<int64_t>(std::stoll(s));
  };
  auto zeros = [](int64_t n, int count) {
    int64_t p = 1;
    for (int i = 0; i < count; ++i) p *= 10;
    return n - n % p;
  };
  std::set<int64_t> stops = {hi};
  for (int k = 1; k < 19; ++k) {
    const int64_t s = nines(lo, k);
    if (!(s >= lo && s < hi)) break;
    stops.insert(s);
  }
  for (int k = 1; k < 19; ++k) {
    const int64_t s = zeros(hi + 1, k) - 1;
    if (!(s > lo && s <= hi)) break;
    stops.insert(s);
  }
  int64_t start = lo;
  for (int64_t stop : stops) {
    const std::string a = std::to_string(start), b = std::to_string(stop);
    std::string pattern;
    int any = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] == b[i]) {
        pattern += std::string(pattern.empty() ? "" : " ") + "\"" + a[i] + "\"";
      } else if (a[i] != '0' || b[i] != '9') {
        pattern += std::string(pattern.empty() ? "" : " ") + "[" + a[i] + "-" + b[i] + "]";
      } else {
        ++any;
      }
    }
    if (any) pattern += std::string(pattern.empty() ? "" : " ") + "[0-9]{" + std::to_string(any) + "}";
    out.push_back(pattern);
    start = stop + 1;
  }
}

// Integers of at least `digits` digits (no leading zero), up to 16 in all.
std::string longer_than(size_t digits) {
  if (digits >= 16) return {};
  return "[1-9] [0-9]{" + std::to_string(digits) + ",15}";
}

// Integers >= lo (lo >= 0) of up to 16 digits.
void at_least(int64_t lo, std::vector<std::string>& out) {
  const size_t digits = std::to_string(lo).size();
  int64_t top = 1;
  for (size_t i = 0; i < digits; ++i) top *= 10;
  nonnegative_range(lo, top - 1, out);
  if (const std::string more = longer_than(digits); !more.empty()) out.push_back(more);
}

class Compiler {
 public:
  Compiler(const Json& root, std::string where) : root_(root), where_(std::move(where)) {}

  std::string run() {
    const std::string top = compile(root_, "#", 0);
    std::string out = "root ::= " + top + "\n";
    out += rules_.str();
    out += kPrimitives;
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw Error(where_ + ": " + path + ": " + what);
  }
  std::string new_rule(const std::string& hint, const std::string& body) {
    if (++rule_count_ > kMaxRules) fail("#", "the schema needs more than " + std::to_string(kMaxRules) + " rules");
    std::string name;
    for (char c : hint)
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '-') name += c;
    name = name.substr(0, 24);
    name = "s" + std::to_string(rule_count_) + (name.empty() ? "" : "-" + name);
    rules_ << name << " ::= " << body << "\n";
    return name;
  }
  uint64_t count(const Json& s, const char* key, const std::string& path) const {
    const Json& v = s[key];
    if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0))
      fail(path, std::string("'") + key + "' must be a non-negative integer");
    const uint64_t n = v.get<uint64_t>();
    if (n > kMaxCount) fail(path, std::string("'") + key + "' above " + std::to_string(kMaxCount) + " is not supported");
    return n;
  }
  // x repeated min..max times (max UINT64_MAX: no bound), separated by `sep`.
  std::string repeated(const std::string& x, const std::string& sep, uint64_t min, uint64_t max) {
    if (max == 0) return "";
    const std::string rest = "(" + sep + " " + x + ")";
    std::string tail;
    if (max == UINT64_MAX)
      tail = rest + (min > 1 ? "{" + std::to_string(min - 1) + ",}" : "*");
    else if (max > 1)
      tail = rest + "{" + std::to_string(min > 0 ? min - 1 : 0) + "," + std::to_string(max - 1) + "}";
    const std::string some = x + (tail.empty() ? "" : " " + tail);
    return min == 0 ? "(" + some + ")?" : some;
  }

  std::string compile(const Json& s, const std::string& path, size_t depth) {
    if (depth > kMaxSchemaDepth) fail(path, "the schema is nested more than 64 deep");
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "the schema false accepts nothing");
      return "json-value";
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    static const std::set<std::string> annotations = {"title",      "description", "examples", "default",
                                                       "$schema",    "$id",         "$comment", "deprecated",
                                                       "readOnly",   "writeOnly",   "$defs",    "definitions"};
    static const std::set<std::string> known = {
        "type",     "properties",       "required",         "additionalProperties", "items",   "prefixItems",
        "minItems", "maxItems",         "minLength",        "maxLength",            "format",  "minimum",
        "maximum",  "exclusiveMinimum", "exclusiveMaximum", "enum",                 "const",   "anyOf",
        "oneOf",    "allOf",            "$ref"};
    for (const auto& [key, value] : s.items())
      if (!annotations.count(key) && !known.count(key))
        fail(path, "the keyword '" + key + "' is not supported");

    if (s.contains("$ref")) return reference(s, path, depth);
    if (s.contains("const")) return literal(s["const"].dump());
    if (s.contains("enum")) {
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty()) fail(path, "'enum' must be a non-empty array");
      std::string alts;
      for (const Json& v : e) alts += (alts.empty() ? "" : " | ") + literal(v.dump());
      return e.size() == 1 ? alts : "(" + alts + ")";
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(key)) continue;
      const Json& list = s[key];
      if (!list.is_array() || list.empty()) fail(path, std::string("'") + key + "' must be a non-empty array");
      if (std::string(key) == "allOf" && list.size() > 1) fail(path, "'allOf' of more than one schema is not supported");
      for (const auto& [k, v] : s.items())
        if (k != key && !annotations.count(k))
          fail(path, std::string("'") + key + "' beside '" + k + "' is not supported (put '" + k + "' in each branch)");
      std::string alts;
      for (size_t i = 0; i < list.size(); ++i)
        alts += (i ? " | " : "") + compile(list[i], path + "/" + key + "/" + std::to_string(i), depth + 1);
      return list.size() == 1 ? alts : "(" + alts + ")";
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty())
        for (const Json& x : t) {
          if (!x.is_string()) fail(path, "'type' must be a name or a list of names");
          types.push_back(x.get<std::string>());
        }
      else fail(path, "'type' must be a name or a list of names");
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum")) {
      types.push_back("number");
    } else {
      return "json-value";
    }
    std::string alts;
    for (const std::string& t : types) alts += (alts.empty() ? "" : " | ") + typed(s, t, path, depth);
    return types.size() == 1 ? alts : "(" + alts + ")";
  }

  std::string typed(const Json& s, const std::string& type, const std::string& path, size_t depth) {
    auto refuse_others = [&](std::initializer_list<const char*> keys) {
      for (const char* k : keys)
        if (s.contains(k)) fail(path, std::string("'") + k + "' does not apply to type " + type);
    };
    if (type == "null") return "json-null";
    if (type == "boolean") return "json-boolean";
    if (type == "string") {
      if (s.contains("format")) {
        const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
        if (s.contains("minLength") || s.contains("maxLength"))
          fail(path, "'format' with 'minLength' or 'maxLength' is not supported");
        if (f == "date") return "\"\\\"\" json-date \"\\\"\"";
        if (f == "time") return "\"\\\"\" json-time \"\\\"\"";
        if (f == "date-time") return "\"\\\"\" json-date \"T\" json-time \"\\\"\"";
        if (f == "uuid") return "\"\\\"\" json-uuid \"\\\"\"";
        fail(path, "the format '" + s["format"].dump() + "' is not supported (date, time, date-time and uuid are)");
      }
      if (!s.contains("minLength") && !s.contains("maxLength")) return "json-string";
      const uint64_t min = s.contains("minLength") ? count(s, "minLength", path) : 0;
      const uint64_t max = s.contains("maxLength") ? count(s, "maxLength", path) : UINT64_MAX;
      if (max < min) fail(path, "'maxLength' is below 'minLength'");
      std::string body = "\"\\\"\" json-char";
      if (max == UINT64_MAX) body += "{" + std::to_string(min) + ",}";
      else body += "{" + std::to_string(min) + "," + std::to_string(max) + "}";
      return new_rule("string", body + " \"\\\"\"");
    }
    if (type == "number") {
      refuse_others({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"});
      return "json-number";
    }
    if (type == "integer") return integer(s, path);
    if (type == "array") return array(s, path, depth);
    if (type == "object") return object(s, path, depth);
    fail(path, "the type '" + type + "' is not a JSON schema type");
  }

  std::string integer(const Json& s, const std::string& path) {
    bool has_lo = false, has_hi = false;
    int64_t lo = 0, hi = 0;
    // The tightest integer bounds: minimum d -> ceil(d), exclusiveMinimum d -> floor(d) + 1, and so on.
    auto bound = [&](const char* key, bool exclusive, bool low) {
      if (!s.contains(key)) return;
      const Json& v = s[key];
      if (!v.is_number()) fail(path, std::string("'") + key + "' must be a number");
      const double d = v.get<double>();
      if (!(std::abs(d) <= static_cast<double>(kMaxBound)))
        fail(path, std::string("'") + key + "' beyond 10^15 is not supported");
      const int64_t val = low ? (exclusive ? static_cast<int64_t>(std::floor(d)) + 1 : static_cast<int64_t>(std::ceil(d)))
                              : (exclusive ? static_cast<int64_t>(std::ceil(d)) - 1 : static_cast<int64_t>(std::floor(d)));
      if (low) lo = has_lo ? std::max(lo, val) : val, has_lo = true;
      else hi = has_hi ? std::min(hi, val) : val, has_hi = true;
    };
    bound("minimum", false, true);
    bound("exclusiveMinimum", true, true);
    bound("maximum", false, false);
    bound("exclusiveMaximum", true, false);
    if (!has_lo && !has_hi) return "json-integer";
    if (has_lo && has_hi && hi < lo) fail(path, "the integer range is empty");
    std::vector<std::string> alts;
    // Negative values: "-" then their magnitudes.
    if (!has_lo || lo < 0) {
      const int64_t mag_lo = has_hi && hi < 0 ? -hi : 1;
      std::vector<std::string> mags;
      if (has_lo) nonnegative_range(mag_lo, -lo, mags);
      else at_least(mag_lo, mags);
      std::string m;
      for (const std::string& x : mags) m += (m.empty() ? "" : " | ") + x;
      alts.push_back("\"-\" (" + m + ")");
    }
    if (!has_hi || hi >= 0) {
      const int64_t from = has_lo && lo > 0 ? lo : 0;
      if (has_hi) nonnegative_range(from, hi, alts);
      else at_least(from, alts);
    }
    std::string body;
    for (const std::string& a : alts) body += (body.empty() ? "" : " | ") + a;
    return new_rule("int", body);
  }

  std::string array(const Json& s, const std::string& path, size_t depth) {
    for (const char* k : {"uniqueItems", "contains", "minContains", "maxContains"})
      if (s.contains(k)) fail(path, std::string("the keyword '") + k + "' is not supported");
    uint64_t min = s.contains("minItems") ? count(s, "minItems", path) : 0;
    uint64_t max = s.contains("maxItems") ? count(s, "maxItems", path) : UINT64_MAX;
    if (max < min) fail(path, "'maxItems' is below 'minItems'");
    if (s.contains("prefixItems")) {
      const Json& p = s["prefixItems"];
      if (!p.is_array() || p.empty()) fail(path, "'prefixItems' must be a non-empty array");
      if (s.contains("items") && !(s["items"].is_boolean() && !s["items"].get<bool>()))
        fail(path, "'prefixItems' with more 'items' is not supported (give items: false)");
      if ((s.contains("minItems") && min != p.size()) || (s.contains("maxItems") && max != p.size()))
        fail(path, "'prefixItems' with other item counts is not supported");
      std::string body = "\"[\" ws";
      for (size_t i = 0; i < p.size(); ++i)
        body += std::string(i ? " \",\" ws " : " ") + compile(p[i], path + "/prefixItems/" + std::to_string(i), depth + 1) + " ws";
      return new_rule("tuple", body + " \"]\"");
    }
    std::string item = "json-value";
    if (s.contains("items")) {
      if (s["items"].is_boolean() && !s["items"].get<bool>()) max = 0;
      else item = compile(s["items"], path + "/items", depth + 1);
    }
    if (max == 0 && min > 0) fail(path, "'items' false with 'minItems' above 0 accepts nothing");
    const std::string inner = repeated(item + " ws", "\",\" ws", min, max);
    return new_rule("array", "\"[\" ws " + (inner.empty() ? "" : inner + " ") + "\"]\"");
  }

  std::string object(const Json& s, const std::string& path, size_t depth) {
    for (const char* k : {"patternProperties", "propertyNames", "minProperties", "maxProperties",
                          "dependentRequired", "dependentSchemas", "unevaluatedProperties"})
      if (s.contains(k)) fail(path, std::string("the keyword '") + k + "' is not supported");
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path, "'required' must be an array of names");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) fail(path, "'required' must be an array of names");
        required.push_back(r.get<std::string>());
      }
    }
    const Json empty = Json::object();
    const Json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) fail(path, "'properties' must be an object");
    if (props.empty()) {
      // No declared properties: a map whose values follow additionalProperties (any JSON when absent or true).
      if (!required.empty()) fail(path, "'required' without 'properties' is not supported");
      const Json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
      if (!extra || (extra->is_boolean() && extra->get<bool>())) return "json-object";
      if (extra->is_boolean()) return new_rule("empty-object", "\"{\" ws \"}\"");
      const std::string value = compile(*extra, path + "/additionalProperties", depth + 1);
      const std::string kv = "json-string ws \":\" ws " + value + " ws";
      return new_rule("map", "\"{\" ws " + repeated(kv, "\",\" ws", 0, UINT64_MAX) + " \"}\"");
    }
    // Declared properties in the schema's order; the required ones always, the others maybe.
    struct Prop {
      std::string kv;
      bool required;
    };
    std::vector<Prop> list;
    for (const auto& [name, sub] : props.items()) {
      const std::string key = literal(Json(name).dump());
      const std::string value = compile(sub, path + "/properties/" + name, depth + 1);
      const bool req = std::find(required.begin(), required.end(), name) != required.end();
      list.push_back({new_rule("kv-" + name, key + " ws \":\" ws " + value + " ws"), req});
    }
    for (const std::string& r : required)
      if (!props.contains(r)) fail(path, "'required' names '" + r + "', which 'properties' does not define");
    // first_i: properties i.. with none written yet; rest_i: the same after one was (a comma first).
    std::vector<std::string> first(list.size() + 1), rest(list.size() + 1);
    for (size_t i = list.size() + 1; i-- > 0;) {
      if (i == list.size()) {
        first[i] = rest[i] = "";
        continue;
      }
      const Prop& p = list[i];
      const std::string after = rest[i + 1].empty() ? "" : " " + rest[i + 1];
      const std::string take_first = p.kv + after;
      const std::string take_rest = "\",\" ws " + p.kv + after;
      std::string f, r;
      if (p.required) {
        f = take_first;
        r = take_rest;
      } else {
        f = "(" + take_first + (first[i + 1].empty() ? ")?" : " | " + first[i + 1] + ")");
        r = "(" + take_rest + (rest[i + 1].empty() ? ")?" : " | " + rest[i + 1] + ")");
      }
      first[i] = new_rule("first", f);
      rest[i] = new_rule("rest", r);
    }
    return new_rule("object", "\"{\" ws " + first[0] + " \"}\"");
  }

  std::string reference(const Json& s, const std::string& path, size_t depth) {
    const Json& r = s["$ref"];
    if (!r.is_string()) fail(path, "'$ref' must be a string");
    for (const auto& [k, v] : s.items())
      if (k != "$ref" && k != "$defs" && k != "definitions" && k != "title" && k != "description" && k != "$comment")
        fail(path, "'$ref' beside '" + k + "' is not supported");
    const std::string ref = r.get<std::string>();
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.empty() || ref[0] != '#') fail(path, "only references into this schema (\"#...\") are supported, not '" + ref + "'");
    // A JSON pointer: "/a/b" with ~1 for '/' and ~0 for '~'.
    const Json* target = &root_;
    std::string_view p = std::string_view(ref).substr(1);
    while (!p.empty()) {
      if (p[0] != '/') fail(path, "'" + ref + "' is not a JSON pointer");
      p.remove_prefix(1);
      const size_t slash = p.find('/');
      std::string part(p.substr(0, slash));
      p = slash == std::string_view::npos ? std::string_view() : p.substr(slash);
      for (size_t i; (i = part.find("~1")) != std::string::npos;) part.replace(i, 2, "/");
      for (size_t i; (i = part.find("~0")) != std::string::npos;) part.replace(i, 2, "~");
      if (target->is_object() && target->contains(part)) {
        target = &(*target)[part];
      } else if (target->is_array() && !part.empty() &&
                 std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) &&
                 part.size() < 9 && std::stoul(part) < target->size()) {
        target = &(*target)[std::stoul(part)];
      } else {
        fail(path, "'$ref' " + ref + " points at nothing in the schema");
      }
    }
    // The rule is named before its body is compiled, so a recursive reference finds it.
    const std::string name = "ref" + std::to_string(refs_.size() + 1);
    refs_[ref] = name;
    const std::string body = compile(*target, ref, depth + 1);
    rules_ << name << " ::= " << body << "\n";
    return name;
  }

  const Json& root_;
  std::string where_;
  std::ostringstream rules_;
  std::map<std::string, std::string> refs_;
  size_t rule_count_ = 0;
};

}  // namespace

std::string json_schema_grammar(std::string_view schema_json, const std::string& where) {
  Json schema;
  try {
    schema = Json::parse(schema_json, [](int depth, Json::parse_event_t, Json&) {
      if (depth > static_cast<int>(4 * kMaxSchemaDepth)) throw Error("the schema is nested too deeply");
      return true;
    });
  } catch (const Json::exception& e) {
    throw Error(where + ": not valid JSON: " + e.what());
  }
  return Compiler(schema, where).run();
}

std::string json_object_grammar() { return std::string("root ::= json-object\n") + kPrimitives; }

}  // namespace mmgpt
