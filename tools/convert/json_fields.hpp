#pragma once
// Reading the fields of a model's JSON config (Hugging Face config.json, the
// LLMs-from-scratch config dict) with errors that name the file and the key.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace mmgpt::convert {

// The JSON object in `path` (at most 16 MB), or an error naming the file.
nlohmann::json read_json_object(const std::string& path);
// The JSON object in `text`; `name` says where it came from in the error.
nlohmann::json parse_json_object(const std::string& text, const std::string& name);

// j[key] as a positive integer fitting u32; an error naming `path` and `key`
// when it is missing or anything else.
uint32_t json_u32(const nlohmann::json& j, const char* key, const std::string& path);
// j[key] as a finite number.
double json_number(const nlohmann::json& j, const char* key, const std::string& path);
// j[key] as a boolean; `fallback` when the key is absent or null.
bool json_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& path);

}  // namespace mmgpt::convert
