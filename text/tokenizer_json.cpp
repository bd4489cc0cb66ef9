#include "text/tokenizer_json.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "text/hf_tokenizer.hpp"

namespace mmgpt {

namespace {

using json = nlohmann::json;

// Gemma 3's tokenizer.json, the largest in use, is 33 MB.
constexpr uint64_t kMaxTokenizerJson = uint64_t(256) << 20;
constexpr uint64_t kMaxTokens = uint64_t(1) << 24;

json parse_json_file(const std::string& path, uint64_t limit) {
  const std::string text = read_small_file(path, limit);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
}

// A token named in tokenizer_config.json: a string or an AddedToken object {"content": ...}.
std::string token_name(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return {};
}

bool is_gpt2_shaped(const json& j, const TokenizerData& t) {
  const json& pre = j.value("pre_tokenizer", json());
  const json& model = j["model"];
  auto is_null = [&](const char* k) { return !j.contains(k) || j[k].is_null(); };
  auto byte_level = [](const json& p, bool use_regex) {
    return p.is_object() && p.value("type", "") == "ByteLevel" && p.value("add_prefix_space", true) == false &&
           p.value("use_regex", true) == use_regex;
  };
  if (!is_null("normalizer") || !byte_level(pre, true)) return false;
  if (!(is_null("decoder") || j["decoder"].value("type", "") == "ByteLevel")) return false;
  if (!(is_null("post_processor") || j["post_processor"].value("type", "") == "ByteLevel")) return false;
  if (model.value("ignore_merges", false) || model.value("byte_fallback", false)) return false;
  if (model.contains("unk_token") && !model["unk_token"].is_null()) return false;
  // "normalized" does not matter: there is no normalizer.
  const json& added = j.value("added_tokens", json::array());
  if (added.size() > 1) return false;
  for (const json& a : added)
    if (a.value("content", "") != "<|endoftext|>" || a.value("lstrip", false) || a.value("rstrip", false) ||
        a.value("single_word", false) || t.eos_id != a.value("id", -1))
      return false;
  return true;
}

// transformers' Llama and Gemma tokenizers rebuild the post-processor from
// tokenizer_config.json's add_bos_token and add_eos_token
// (update_post_processor): the BOS, the text, the EOS, each only when asked.
// Other tokenizer classes leave tokenizer.json's post-processor as it is.
void apply_add_bos_eos(json& j, const json& cfg, const std::unordered_map<std::string_view, int64_t>& id_of,
                       const std::string& config_path) {
  static const char* const kRebuilding[] = {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer",
                                            "CodeLlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"};
  const std::string cls = cfg.is_object() ? cfg.value("tokenizer_class", "") : "";
  if (std::find(std::begin(kRebuilding), std::end(kRebuilding), cls) == std::end(kRebuilding)) return;
  auto flag = [&](const char* key, bool fallback) {
    if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
    if (!cfg[key].is_boolean()) throw Error(config_path + ": " + key + " is not true or false");
    return cfg[key].get<bool>();
  };
  if (!cfg.contains("add_bos_token") && !cfg.contains("add_eos_token")) return;
  // The classes' defaults: a BOS and no EOS.
  const bool add_bos = flag("add_bos_token", true), add_eos = flag("add_eos_token", false);
  json single = json::array(), specials = json::object();
  auto special = [&](const char* key) {
    const std::string name = cfg.contains(key) ? token_name(cfg[key]) : "";
    const auto it = id_of.find(name);
    if (name.empty() || it == id_of.end())
      throw Error(config_path + ": " + (key == std::string("bos_token") ? "add_bos_token" : "add_eos_token") +
                  " is true but " + key + " is not a token");
    single.push_back({{"SpecialToken", {{"id", name}, {"type_id", 0}}}});
    specials[name] = {{"id", name}, {"ids", json::array({static_cast<uint64_t>(it->second)})}, {"tokens", {name}}};
  };
  if (add_bos) special("bos_token");
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos) special("eos_token");
  j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", std::move(single)},
                         {"special_tokens", std::move(specials)}};
}

}  // namespace

void finish_bpe_tokenizer(TokenizerData& t, const json& pipeline, const std::string& where) {
  t.pipeline = pipeline.dump();
  // Everything it needs must be supported: build it once now, so conversion refuses what loading would.
  const std::vector<std::string_view> tokens(t.tokens.begin(), t.tokens.end());
  const std::vector<std::pair<std::string_view, std::string_view>> rules(t.merges.begin(), t.merges.end());
  HfTokenizer check(tokens, rules, t.merge_ranks, pipeline, where);
  // What the file's tables hold beside the merges.
  t.keys.clear(), t.bytes.clear();
  t.keys.reserve(t.tokens.size());
  t.bytes.reserve(t.tokens.size());
  for (size_t id = 0; id < t.tokens.size(); ++id) {
    t.keys.push_back(check.key_of(static_cast<int32_t>(id)));
    t.bytes.push_back(check.token_bytes(static_cast<int32_t>(id)));
  }
  t.byte_ids = check.byte_ids();
}

TokenizerData read_tokenizer_json(const std::string& path) {
  json j = parse_json_file(path, kMaxTokenizerJson);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw Error(path + ": not a tokenizer.json (no \"model\" object)");
  json& model = j["model"];
  const std::string type = model.value("type", "BPE");
  if (type != "BPE")
    throw Error(path + ": model.type '" + type + "' is not supported (mmgpt reads BPE tokenizers; not WordPiece, "
                "Unigram or WordLevel)");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    throw Error(path + ": model.vocab is not an object of {token: id}");
  if (!model.contains("merges") || !model["merges"].is_array()) throw Error(path + ": model.merges is not a list");

  TokenizerData t;
  t.kind = TokenizerKind::Bpe;
  // id -> spelling, from the model's vocabulary and the added tokens.
  std::vector<std::string> spelling;
  std::vector<bool> in_model;
  auto put = [&](uint64_t id, const std::string& s, bool model_token, const std::string& what) {
    if (id >= kMaxTokens) throw Error(path + ": " + what + " has id " + std::to_string(id) + ", past the limit");
    if (id >= spelling.size()) spelling.resize(id + 1), in_model.resize(id + 1, false);
    if (s.empty()) throw Error(path + ": " + what + " is the empty string");
    if (!spelling[id].empty() && spelling[id] != s)
      throw Error(path + ": id " + std::to_string(id) + " is both " + json(spelling[id]).dump() + " and " +
                  json(s).dump());
    if (model_token && in_model[id]) throw Error(path + ": id " + std::to_string(id) + " is given to two tokens");
    spelling[id] = s;
    if (model_token) in_model[id] = true;
  };
  for (auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_unsigned())
      throw Error(path + ": model.vocab: the id of " + json(token).dump() + " is not a non-negative integer");
    put(id.get<uint64_t>(), token, true, "model.vocab token " + json(token).dump());
  }
  const json& added = j.value("added_tokens", json::array());
  if (!added.is_array()) throw Error(path + ": added_tokens is not a list");
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content") ||
        !a["content"].is_string())
      throw Error(path + ": added_tokens[" + std::to_string(i) + "] has no integer id and string content");
    put(a["id"].get<uint64_t>(), a["content"].get<std::string>(), false, "added_tokens[" + std::to_string(i) + "]");
  }
  for (size_t id = 0; id < spelling.size(); ++id)
    if (spelling[id].empty())
      throw Error(path + ": id " + std::to_string(id) + " has no token (the ids must run from 0 without gaps)");
  t.tokens = std::move(spelling);

  const json& merges = model["merges"];
  t.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        throw Error(path + ": model.merges[" + std::to_string(i) + "] " + m.dump() + " is not \"a b\"");
      t.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      t.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw Error(path + ": model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }

  // The end token: tokenizer_config.json's eos_token, else "<|endoftext|>" where the vocabulary has it.
  std::unordered_map<std::string_view, int64_t> id_of;
  for (size_t id = 0; id < t.tokens.size(); ++id) id_of.emplace(t.tokens[id], static_cast<int64_t>(id));
  // Its chat template and the special tokens' text a template is given.
  const std::string config_path = join_path(parent_dir(path), "tokenizer_config.json");
  std::string eos = "<|endoftext|>";
  json chat;
  if (is_file(config_path)) {
    const json cfg = parse_json_file(config_path, kMaxTokenizerJson);
    if (!cfg.is_object()) throw Error(config_path + ": not a JSON object");
    if (cfg.contains("eos_token") && !cfg["eos_token"].is_null()) {
      eos = token_name(cfg["eos_token"]);
      if (eos.empty() || !id_of.count(eos))
        throw Error(config_path + ": eos_token " + cfg["eos_token"].dump() + " is not a token of " + path);
    }
    if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
      const json& tpl = cfg["chat_template"];
      bool ok = tpl.is_string() || tpl.is_array();
      if (tpl.is_array())
        for (const json& e : tpl)
          ok &= e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("template") &&
                e["template"].is_string();
      if (!ok) throw Error(config_path + ": chat_template is neither a string nor a list of {name, template}");
      chat["chat_template"] = tpl;
      json specials = json::object();
      for (const char* name : {"bos_token", "eos_token", "unk_token", "pad_token"})
        if (cfg.contains(name) && !cfg[name].is_null()) {
          const std::string text = token_name(cfg[name]);
          if (text.empty()) throw Error(config_path + ": " + name + " is neither a string nor {\"content\": ...}");
          specials[name] = text;
        }
      chat["special_tokens"] = std::move(specials);
    }
    apply_add_bos_eos(j, cfg, id_of, config_path);
  }
  if (auto it = id_of.find(eos); it != id_of.end()) t.eos_id = it->second;

  // Every token that ends a turn stops generation: generation_config.json's
  // eos_token_id (an id or a list of them) and the end token above.
  json end_ids = json::array();
  const std::string gen_path = join_path(parent_dir(path), "generation_config.json");
  if (is_file(gen_path)) {
    const json gen = parse_json_file(gen_path, uint64_t(1) << 20);
    const json ids = gen.is_object() ? gen.value("eos_token_id", json()) : json();
    for (const json& id : ids.is_array() ? ids : ids.is_null() ? json::array() : json::array({ids})) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= t.tokens.size())
        throw Error(gen_path + ": eos_token_id " + id.dump() + " is not a token of " + path + " (it has " +
                    std::to_string(t.tokens.size()) + ")");
      end_ids.push_back(id.get<uint64_t>());
    }
  }
  if (t.eos_id < 0 && !end_ids.empty()) t.eos_id = end_ids[0].get<int64_t>();
  if (t.eos_id >= 0) end_ids.push_back(static_cast<uint64_t>(t.eos_id));
  std::sort(end_ids.begin(), end_ids.end());
  end_ids.erase(std::unique(end_ids.begin(), end_ids.end()), end_ids.end());

  if (chat.is_null() && end_ids.size() <= 1 && is_gpt2_shaped(j, t)) {
    bool contiguous = true;
    for (size_t id = 0; id < in_model.size(); ++id) contiguous &= in_model[id] || t.tokens[id] == "<|endoftext|>";
    if (contiguous) {
      t.kind = TokenizerKind::Gpt2Bpe;
      return t;
    }
  }

  // The pipeline: everything but the vocabulary and merges, and which ids are only added tokens.
  model.erase("vocab");
  model.erase("merges");
  json not_in_model = json::array();
  for (size_t id = 0; id < in_model.size(); ++id)
    if (!in_model[id]) not_in_model.push_back(id);
  j["not_in_model"] = std::move(not_in_model);
  for (const char* unused : {"version", "truncation", "padding"}) j.erase(unused);
  // The added tokens as read back (text/hf_tokenizer.cpp): the content is the
  // id's spelling and the flags have defaults, so only what differs is kept
  // (Gemma 3 has thousands, read at every load).
  for (json& a : j["added_tokens"]) {
    const bool special = a.value("special", false);
    a.erase("content");
    if (!special) a.erase("special");
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (!a.value(flag, false)) a.erase(flag);
    if (a.contains("normalized") && a["normalized"].is_boolean() && a["normalized"].get<bool>() == !special)
      a.erase("normalized");
  }
  if (!chat.is_null()) j["chat"] = std::move(chat);
  if (end_ids.size() > 1) j["end_ids"] = std::move(end_ids);
  finish_bpe_tokenizer(t, j, path);
  return t;
}

}  // namespace mmgpt
