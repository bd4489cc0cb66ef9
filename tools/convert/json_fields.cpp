#include "tools/convert/json_fields.hpp"

#include <cmath>

#include "formats/error.hpp"
#include "formats/file_util.hpp"

namespace mmgpt::convert {

using nlohmann::json;

json read_json_object(const std::string& path) { return parse_json_object(read_small_file(path, 16 << 20), path); }

json parse_json_object(const std::string& text, const std::string& name) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error(name + ": not a JSON object");
  return j;
}

uint32_t json_u32(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) throw Error(path + ": field '" + key + "' is missing");
  const json& v = j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > int64_t(UINT32_MAX))
    throw Error(path + ": field '" + key + "' is " + v.dump() + ", expected a positive integer");
  return uint32_t(v.get<int64_t>());
}

double json_number(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) throw Error(path + ": field '" + key + "' is missing");
  const json& v = j.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    throw Error(path + ": field '" + key + "' is " + v.dump() + ", expected a number");
  return v.get<double>();
}

bool json_bool(const json& j, const char* key, bool fallback, const std::string& path) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_boolean())
    throw Error(path + ": field '" + key + "' is " + j.at(key).dump() + ", expected true or false");
  return j.at(key).get<bool>();
}

}  // namespace mmgpt::convert
