#include "text/tiktoken.hpp"

#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "formats/bpe_table.hpp"
#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "text/tokenizer_json.hpp"

namespace mmgpt {

const char* const kLlama3ChatTemplate =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}";

// nanochat's render_conversation (nanochat/tokenizer.py): a system message is
// folded into the first user message; user and assistant alternate; an
// assistant's content is a string or a list of text, python and
// python_output parts. nanochat encodes each part on its own, so two text
// parts in a row, which one rendered string would join, are refused.
const char* const kNanochatChatTemplate =
    "{%- if messages | length == 0 -%}{{ raise_exception('Conversation has less than 1 message') }}{%- endif -%}\n"
    "{%- set ns = namespace(offset=0, system='') -%}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "  {%- if messages | length < 2 or messages[1]['role'] != 'user' -%}"
    "{{ raise_exception('System message must be followed by a user message') }}{%- endif -%}\n"
    "  {%- set ns.offset = 1 -%}{%- set ns.system = messages[0]['content'] + '\\n\\n' -%}\n"
    "{%- endif -%}\n"
    "{{- bos_token -}}\n"
    "{%- for message in messages[ns.offset:] -%}\n"
    "  {%- set expected = 'user' if loop.index0 % 2 == 0 else 'assistant' -%}\n"
    "  {%- if message['role'] != expected -%}{{ raise_exception('Message ' ~ loop.index0 ~ ' is from ' ~ "
    "message['role'] ~ ' but should be from ' ~ expected) }}{%- endif -%}\n"
    "  {%- if message['role'] == 'user' -%}\n"
    "    {%- if message['content'] is not string -%}"
    "{{ raise_exception('User messages are simply expected to be strings') }}{%- endif -%}\n"
    "    {{- '<|user_start|>' + (ns.system if loop.first else '') + message['content'] + '<|user_end|>' -}}\n"
    "  {%- else -%}\n"
    "    {{- '<|assistant_start|>' -}}\n"
    "    {%- if message['content'] is string -%}{{- message['content'] -}}\n"
    "    {%- else -%}\n"
    "      {%- set parts = message['content'] -%}\n"
    "      {%- for part in parts -%}\n"
    "        {%- if part['type'] == 'text' -%}\n"
    "          {%- if not loop.first and parts[loop.index0 - 1]['type'] == 'text' -%}"
    "{{ raise_exception('two text parts in a row: nanochat encodes them apart, one rendered prompt would join "
    "them') }}{%- endif -%}\n"
    "          {{- part['text'] -}}\n"
    "        {%- elif part['type'] == 'python' -%}{{- '<|python_start|>' + part['text'] + '<|python_end|>' -}}\n"
    "        {%- elif part['type'] == 'python_output' -%}"
    "{{- '<|output_start|>' + part['text'] + '<|output_end|>' -}}\n"
    "        {%- else -%}{{ raise_exception('Unknown part type: ' ~ part['type']) }}{%- endif -%}\n"
    "      {%- endfor -%}\n"
    "    {%- endif -%}\n"
    "    {{- '<|assistant_end|>' -}}\n"
    "  {%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|assistant_start|>' -}}{%- endif -%}\n";

namespace {

using json = nlohmann::json;

// Llama 3's tokenizer.model is 2.2 MB; o200k_base's rank file 3.6 MB.
constexpr uint64_t kMaxRankFile = uint64_t(64) << 20;
constexpr uint64_t kMaxIds = uint64_t(1) << 24;
// The stored merge table holds at most 2^24 rules (formats/mmgpt_file_parse.cpp).
constexpr uint64_t kMaxMerges = uint64_t(1) << 24;

// Meta's Llama 3 tokenizer (llama-models, models/llama3/tokenizer.py).
constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr int kLlama3Specials = 256;

std::vector<std::string> llama3_specials() {
  std::vector<std::string> s = {"<|begin_of_text|>",  "<|end_of_text|>",     "<|reserved_special_token_0|>",
                                "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                                "<|start_header_id|>", "<|end_header_id|>",  "<|eom_id|>",
                                "<|eot_id|>",          "<|python_tag|>"};
  for (int i = 2; s.size() < kLlama3Specials; ++i) s.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  return s;
}

// nanochat's SPECIAL_TOKENS (nanochat/tokenizer.py).
constexpr const char* kNanochatSpecials[] = {"<|bos|>",           "<|user_start|>",   "<|user_end|>",
                                             "<|assistant_start|>", "<|assistant_end|>", "<|python_start|>",
                                             "<|python_end|>",      "<|output_start|>", "<|output_end|>"};

// A tiktoken vocabulary and what goes around it.
struct Vocabulary {
  std::vector<std::string> ranked;                           // rank -> token bytes
  std::vector<std::pair<std::string, uint64_t>> specials;    // text, id
  std::string pattern;
  std::string bos, eos;                                      // special tokens' text, or empty
  std::vector<std::string> ends;                             // more special tokens that end a turn
  const char* chat_template = nullptr;
};

int base64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with its padding, as Python's base64.b64decode reads it; false when malformed.
bool decode_base64(std::string_view s, std::string& out) {
  out.clear();
  if (s.empty() || s.size() % 4 != 0) return false;
  size_t pad = 0;
  while (pad < 2 && s[s.size() - 1 - pad] == '=') ++pad;
  for (size_t i = 0; i < s.size(); i += 4) {
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const bool padding = i + 4 == s.size() && k >= 4 - pad;
      const int d = padding ? 0 : base64_value(static_cast<unsigned char>(s[i + k]));
      if (d < 0) return false;
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    const size_t n = i + 4 == s.size() ? 3 - pad : 3;
    for (size_t k = 0; k < n; ++k) out.push_back(static_cast<char>((v >> (16 - 8 * k)) & 0xFF));
  }
  return true;
}

bool all_digits(std::string_view s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// The ranks: every token once, every rank once, 0..n-1.
void check_ranks(const std::vector<std::string>& ranked, const std::vector<bool>& seen, const std::string& path) {
  for (size_t r = 0; r < seen.size(); ++r)
    if (!seen[r])
      throw Error(path + ": no token has rank " + std::to_string(r) + " (the ranks must run from 0 without gaps)");
  if (ranked.empty()) throw Error(path + ": holds no tokens");
}

TokenizerData tiktoken_tokenizer(Vocabulary v, const std::string& path) {
  const size_t n = v.ranked.size();
  TokenizerData t;
  t.kind = TokenizerKind::Bpe;
  // Special tokens take the ids after the ranks, without gaps.
  const size_t total = n + v.specials.size();
  if (total > kMaxIds) throw Error(path + ": " + std::to_string(total) + " tokens, past the limit");
  t.tokens.resize(total);
  std::unordered_map<std::string, int64_t> special_id;
  for (const auto& [text, id] : v.specials) {
    if (id < n || id >= total)
      throw Error(path + ": special token " + json(text).dump() + " has id " + std::to_string(id) +
                  " (the special tokens must take the ids " + std::to_string(n) + ".." + std::to_string(total - 1) +
                  ", after the " + std::to_string(n) + " ranks)");
    if (text.empty()) throw Error(path + ": a special token is the empty string");
    if (!valid_utf8(text)) throw Error(path + ": special token " + std::to_string(id) + " is not valid UTF-8");
    if (!t.tokens[id].empty()) throw Error(path + ": id " + std::to_string(id) + " is given to two special tokens");
    if (!special_id.emplace(text, static_cast<int64_t>(id)).second)
      throw Error(path + ": special token " + json(text).dump() + " appears twice");
    t.tokens[id] = text;
  }

  // The vocabulary, spelled as byte-level BPE spells it, and every split of a
  // token into two tokens as a merge at the token's rank.
  std::unordered_map<std::string_view, uint32_t> rank_of;
  rank_of.reserve(n);
  for (size_t r = 0; r < n; ++r) rank_of.emplace(v.ranked[r], static_cast<uint32_t>(r));
  std::vector<std::string> spelling(n);
  for (size_t r = 0; r < n; ++r) spelling[r] = bpe_token_spelling(v.ranked[r]);
  for (size_t r = 0; r < n; ++r) {
    const std::string_view tok = v.ranked[r];
    const int32_t rank = static_cast<int32_t>(t.merges.size());
    for (size_t k = 1; k < tok.size(); ++k) {
      const auto left = rank_of.find(tok.substr(0, k)), right = rank_of.find(tok.substr(k));
      if (left == rank_of.end() || right == rank_of.end()) continue;
      if (t.merges.size() >= kMaxMerges)
        throw Error(path + ": more than " + std::to_string(kMaxMerges) + " merges, past the limit");
      t.merges.emplace_back(spelling[left->second], spelling[right->second]);
      t.merge_ranks.push_back(rank);
    }
  }
  for (size_t r = 0; r < n; ++r) t.tokens[r] = std::move(spelling[r]);

  auto id_of = [&](const std::string& text) -> int64_t {
    const auto it = special_id.find(text);
    return it == special_id.end() ? -1 : it->second;
  };
  json pipeline;
  pipeline["normalizer"] = nullptr;
  // Only the pattern's matches are pieces: the text between them is removed.
  pipeline["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"}, {"pattern", {{"Regex", v.pattern}}}, {"behavior", "Removed"}, {"invert", true}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  pipeline["model"] = {{"type", "BPE"}, {"ignore_merges", true}};
  pipeline["decoder"] = {{"type", "ByteLevel"}};
  json added = json::array(), not_in_model = json::array();
  for (size_t id = n; id < total; ++id) {
    added.push_back({{"id", id}, {"special", true}});
    not_in_model.push_back(id);
  }
  pipeline["added_tokens"] = std::move(added);
  pipeline["not_in_model"] = std::move(not_in_model);
  if (const int64_t bos = id_of(v.bos); bos >= 0)
    pipeline["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", v.bos}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{v.bos, {{"id", v.bos}, {"ids", json::array({static_cast<uint64_t>(bos)})}, {"tokens", json::array({v.bos})}}}}}};
  t.eos_id = id_of(v.eos);
  json end_ids = json::array();
  for (const std::string& e : v.ends)
    if (const int64_t id = id_of(e); id >= 0) end_ids.push_back(static_cast<uint64_t>(id));
  if (t.eos_id >= 0) end_ids.push_back(static_cast<uint64_t>(t.eos_id));
  if (end_ids.size() > 1) pipeline["end_ids"] = std::move(end_ids);
  if (v.chat_template) {
    json specials = json::object();
    if (!v.bos.empty()) specials["bos_token"] = v.bos;
    if (!v.eos.empty()) specials["eos_token"] = v.eos;
    pipeline["chat"] = {{"chat_template", v.chat_template}, {"special_tokens", std::move(specials)}};
  }
  finish_bpe_tokenizer(t, pipeline, path);
  return t;
}

}  // namespace

TokenizerData read_tiktoken_ranks(const std::string& path) {
  const std::string text = read_small_file(path, kMaxRankFile);
  {
    std::string_view first(text.data(), std::min(text.find('\n'), text.size()));
    if (!first.empty() && first.back() == '\r') first.remove_suffix(1);
    const size_t sp = first.find(' ');
    std::string bytes;
    if (sp == std::string_view::npos || !decode_base64(first.substr(0, sp), bytes) || !all_digits(first.substr(sp + 1)))
      throw Error(path + ": not a tiktoken rank file (\"TOKEN RANK\" lines); a SentencePiece model is not read: "
                  "convert with the tokenizer.json made from it");
  }
  Vocabulary v;
  std::vector<bool> seen;
  std::unordered_map<std::string, size_t> line_of;  // token bytes -> the line that gave it
  size_t line_no = 0;
  std::string bytes;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = path + ": line " + std::to_string(line_no);
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      throw Error(where + " is not \"TOKEN RANK\" (a base64 token, a space and its rank)");
    if (!decode_base64(line.substr(0, sp), bytes) || bytes.empty())
      throw Error(where + ": the token is not base64 of one or more bytes");
    const std::string_view rank_text = line.substr(sp + 1);
    if (!all_digits(rank_text) || std::stoull(std::string(rank_text)) >= kMaxIds)
      throw Error(where + ": the rank '" + std::string(rank_text.substr(0, 20)) + "' is not an integer below " +
                  std::to_string(kMaxIds));
    const size_t rank = std::stoull(std::string(rank_text));
    if (const auto [it, fresh] = line_of.emplace(bytes, line_no); !fresh)
      throw Error(where + ": repeats the token of line " + std::to_string(it->second));
    if (rank >= seen.size()) seen.resize(rank + 1, false), v.ranked.resize(rank + 1);
    if (seen[rank]) throw Error(where + ": rank " + std::to_string(rank) + " is given to two tokens");
    seen[rank] = true;
    v.ranked[rank] = bytes;
  }
  check_ranks(v.ranked, seen, path);
  // Meta's Llama 3 tokenizer: its pattern, its special tokens after the ranks, its chat format.
  v.pattern = kLlama3Pattern;
  const std::vector<std::string> specials = llama3_specials();
  for (size_t i = 0; i < specials.size(); ++i) v.specials.emplace_back(specials[i], v.ranked.size() + i);
  v.bos = "<|begin_of_text|>";
  v.eos = "<|end_of_text|>";
  v.ends = {"<|eom_id|>", "<|eot_id|>"};
  v.chat_template = kLlama3ChatTemplate;
  return tiktoken_tokenizer(std::move(v), path);
}

bool is_tiktoken_encoding(const pickle::Value& root) {
  const pickle::Value* cls = root.get("__class__");
  return cls && cls->is_str() && cls->text == "tiktoken.core.Encoding";
}

TokenizerData read_tiktoken_encoding(const pickle::Value& root, const std::string& path) {
  using Kind = pickle::Value::Kind;
  if (!is_tiktoken_encoding(root)) throw Error(path + ": not a pickled tiktoken Encoding");
  const pickle::Value* name = root.get("name");
  const pickle::Value* ranks = root.get("mergeable_ranks");
  if (!ranks) {
    const std::string n = name && name->is_str() ? name->text : "?";
    throw Error(path + ": the Encoding is pickled by name ('" + n +
                "', one of tiktoken's own), so its ranks are not in the file");
  }
  const pickle::Value* pattern = root.get("pat_str");
  const pickle::Value* specials = root.get("special_tokens");
  if (!pattern || !pattern->is_str() || !valid_utf8(pattern->text))
    throw Error(path + ": the Encoding's pat_str is not a string of valid UTF-8");
  if (ranks->kind != Kind::Dict) throw Error(path + ": the Encoding's mergeable_ranks is not a dict");
  if (specials && specials->kind != Kind::Dict) throw Error(path + ": the Encoding's special_tokens is not a dict");

  Vocabulary v;
  v.pattern = pattern->text;
  std::vector<bool> seen;
  std::unordered_map<std::string_view, size_t> entry_of;
  for (size_t i = 0; i < ranks->entries.size(); ++i) {
    const auto& [k, r] = ranks->entries[i];
    const std::string where = path + ": mergeable_ranks entry " + std::to_string(i);
    if (!k || k->kind != Kind::Bytes || k->text.empty()) throw Error(where + ": the token is not non-empty bytes");
    if (!r || !r->is_int() || r->integer < 0 || uint64_t(r->integer) >= kMaxIds)
      throw Error(where + ": the rank is not an integer in 0.." + std::to_string(kMaxIds - 1));
    if (const auto [it, fresh] = entry_of.emplace(k->text, i); !fresh)
      throw Error(where + ": repeats the token of entry " + std::to_string(it->second));
    const size_t rank = static_cast<size_t>(r->integer);
    if (rank >= seen.size()) seen.resize(rank + 1, false), v.ranked.resize(rank + 1);
    if (seen[rank]) throw Error(where + ": rank " + std::to_string(rank) + " is given to two tokens");
    seen[rank] = true;
    v.ranked[rank] = k->text;
  }
  check_ranks(v.ranked, seen, path);
  bool nanochat = specials != nullptr;
  if (specials)
    for (const auto& [k, id] : specials->entries) {
      if (!k || !k->is_str()) throw Error(path + ": a special_tokens key is not a string");
      if (!id || !id->is_int() || id->integer < 0)
        throw Error(path + ": special token " + json(k->text).dump() + " has no non-negative integer id");
      v.specials.emplace_back(k->text, static_cast<uint64_t>(id->integer));
    }
  for (const char* s : kNanochatSpecials) {
    bool found = false;
    for (const auto& [text, id] : v.specials) found |= text == s;
    nanochat &= found;
  }
  if (nanochat) {
    // nanochat prepends <|bos|> to every document and its engine stops at <|bos|> and <|assistant_end|>.
    v.bos = v.eos = "<|bos|>";
    v.ends = {"<|assistant_end|>"};
    v.chat_template = kNanochatChatTemplate;
  } else {
    v.eos = "<|endoftext|>";
  }
  return tiktoken_tokenizer(std::move(v), path);
}

}  // namespace mmgpt
