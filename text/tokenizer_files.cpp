#include "text/tokenizer_files.hpp"

#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "formats/torch_checkpoint.hpp"
#include "text/tiktoken.hpp"
#include "text/tokenizer_json.hpp"

namespace mmgpt {

namespace {

constexpr const char* kEndOfText = "<|endoftext|>";
// GPT-2's vocab.json is 1 MB and its merges 0.5 MB; the largest published
// BPE vocabularies are a few times that. Everything read is held in memory
// (about 40 bytes per token or merge), so the files are capped well below
// what would matter.
constexpr uint64_t kMaxTokenizerFile = uint64_t(64) << 20;

// Reads vocab.json as JSON events straight into (token, id) pairs: only a
// flat {string: integer} object is accepted, so a hostile file of nested
// arrays cannot make the parser build a document many times its size.
class VocabReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit VocabReader(const std::string& path) : path_(path) {}
  std::vector<std::pair<std::string, int64_t>> pairs;

  bool null() override { return bad_value(); }
  bool boolean(bool) override { return bad_value(); }
  bool number_integer(number_integer_t v) override { return value(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return v > uint64_t(INT64_MAX) ? bad_value() : value(static_cast<int64_t>(v));
  }
  bool number_float(number_float_t, const string_t&) override { return bad_value(); }
  bool string(string_t&) override { return bad_value(); }
  bool binary(binary_t&) override { return bad_value(); }
  bool start_object(std::size_t) override {
    if (started_) return bad_value();
    started_ = true;
    return true;
  }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return bad_value(); }
  bool end_array() override { return true; }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    throw Error(path_ + ": not a JSON object of {token: id}");
  }

 private:
  const std::string& path_;
  bool started_ = false;
  std::string key_;

  bool value(int64_t id) {
    pairs.emplace_back(std::move(key_), id);
    return true;
  }
  bool bad_value() {
    if (!started_) throw Error(path_ + ": not a JSON object of {token: id}");
    throw Error(path_ + ": the id of token " + nlohmann::json(key_).dump() + " is not an integer");
  }
};

}  // namespace

namespace {

TokenizerData char_meta(const pickle::ValuePtr& root, const std::string& meta_pkl) {
  if (!root || !root->is_dict()) throw Error(meta_pkl + ": not a dict (expected nanoGPT's meta.pkl with 'itos')");
  const pickle::Value* itos = root->get("itos");
  if (!itos || !itos->is_dict())
    throw Error(meta_pkl + ": no 'itos' dict (only character vocabularies are read from meta.pkl)");

  const size_t n = itos->entries.size();
  if (n == 0) throw Error(meta_pkl + ": 'itos' is empty");
  TokenizerData tok;
  tok.kind = TokenizerKind::Char;
  tok.tokens.resize(n);
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int64_t> ids;
  for (const auto& [k, v] : itos->entries) {
    if (!k || !k->is_int()) throw Error(meta_pkl + ": an 'itos' key is not an integer id");
    const int64_t id = k->integer;
    if (id < 0 || uint64_t(id) >= n)
      throw Error(meta_pkl + ": 'itos' id " + std::to_string(id) + " is outside 0.." + std::to_string(n - 1) +
                  " (ids must be exactly 0..n-1 without gaps)");
    if (seen[size_t(id)]) throw Error(meta_pkl + ": 'itos' id " + std::to_string(id) + " appears twice");
    if (!v || !v->is_str()) throw Error(meta_pkl + ": 'itos'[" + std::to_string(id) + "] is not a string");
    if (!valid_utf8(v->text) || utf8_length(v->text) != 1)
      throw Error(meta_pkl + ": 'itos'[" + std::to_string(id) + "] is not a single character");
    if (!ids.emplace(v->text, id).second)
      throw Error(meta_pkl + ": 'itos'[" + std::to_string(id) + "] repeats the character of id " +
                  std::to_string(ids[v->text]));
    seen[size_t(id)] = true;
    tok.tokens[size_t(id)] = v->text;
  }

  if (const pickle::Value* stoi = root->get("stoi")) {
    if (!stoi->is_dict() || stoi->entries.size() != n)
      throw Error(meta_pkl + ": 'stoi' does not have the same " + std::to_string(n) + " entries as 'itos'");
    for (const auto& [k, v] : stoi->entries) {
      if (!k || !k->is_str() || !v || !v->is_int()) throw Error(meta_pkl + ": 'stoi' is not a {str: int} dict");
      auto it = ids.find(k->text);
      if (it == ids.end() || it->second != v->integer)
        throw Error(meta_pkl + ": 'stoi' maps a character to id " + std::to_string(v->integer) +
                    " but 'itos' disagrees");
    }
  }
  if (const pickle::Value* vs = root->get("vocab_size"); vs && vs->is_int() && uint64_t(vs->integer) != n)
    throw Error(meta_pkl + ": 'vocab_size' is " + std::to_string(vs->integer) + " but 'itos' has " + std::to_string(n) +
                " entries");
  return tok;
}

}  // namespace

TokenizerData read_char_meta(const std::string& meta_pkl) { return char_meta(load_pickle_file(meta_pkl), meta_pkl); }

TokenizerData read_pickled_tokenizer(const std::string& path) {
  const pickle::ValuePtr root = load_pickle_file(path);
  if (root && is_tiktoken_encoding(*root)) return read_tiktoken_encoding(*root, path);
  return char_meta(root, path);
}


TokenizerData read_bpe_files(const std::string& vocab_json, const std::string& merges_txt) {
  TokenizerData tok;
  tok.kind = TokenizerKind::Gpt2Bpe;

  VocabReader vocab(vocab_json);
  {
    const std::string text = read_small_file(vocab_json, kMaxTokenizerFile);
    nlohmann::json::sax_parse(text, &vocab);
  }
  if (vocab.pairs.empty()) throw Error(vocab_json + ": not a JSON object of {token: id}");
  const size_t n = vocab.pairs.size();
  tok.tokens.resize(n);
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string_view, int64_t> ids;  // a JSON object may repeat a key; a vocabulary may not
  for (auto& [token, id] : vocab.pairs) {
    if (const auto [it, fresh] = ids.emplace(token, id); !fresh)
      throw Error(vocab_json + ": token " + nlohmann::json(token).dump() + " appears twice (ids " +
                  std::to_string(it->second) + " and " + std::to_string(id) + ")");
    if (id < 0 || uint64_t(id) >= n)
      throw Error(vocab_json + ": token " + nlohmann::json(token).dump() + " has id " + std::to_string(id) +
                  ", outside 0.." + std::to_string(n - 1) + " (ids must be exactly 0..n-1 without gaps)");
    if (seen[size_t(id)]) throw Error(vocab_json + ": id " + std::to_string(id) + " is given to two tokens");
    if (token.empty()) throw Error(vocab_json + ": the token of id " + std::to_string(id) + " is empty");
    seen[size_t(id)] = true;
    if (token == kEndOfText) tok.eos_id = id;
    tok.tokens[size_t(id)] = token;  // copied: `ids` still views the pair's string
  }

  // Line by line, without a copy of the lines: a file of blank lines costs nothing.
  const std::string text = read_small_file(merges_txt, kMaxTokenizerFile);
  size_t line_no = 0, blank_no = 0;  // blank_no: the first blank line not yet followed by a merge
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {  // only trailing blank lines are allowed
      if (!blank_no) blank_no = line_no;
      continue;
    }
    if (blank_no)
      throw Error(merges_txt + ": line " + std::to_string(blank_no) + " is not a merge of two tokens \"a b\"");
    const size_t no = line_no;
    if (no == 1 && line.rfind("#version", 0) == 0) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos)
      throw Error(merges_txt + ": line " + std::to_string(no) + " is not a merge of two tokens \"a b\"");
    std::string left(line.substr(0, space)), right(line.substr(space + 1));
    if (!valid_utf8(left) || !valid_utf8(right))
      throw Error(merges_txt + ": line " + std::to_string(no) + " is not valid UTF-8");
    tok.merges.emplace_back(std::move(left), std::move(right));
  }
  return tok;
}

namespace {

struct FileSet {
  const char* first;
  const char* second;  // null for meta.pkl
};
// tokenizer.json comes first: a Hugging Face directory may also hold the
// vocab.json + merges.txt it was made from, which lack its added tokens.
// tokenizer.model is Llama 3's tiktoken rank file (original/) or a
// SentencePiece model (refused); tokenizer.pkl is nanochat's tiktoken Encoding.
constexpr FileSet kSets[] = {{"tokenizer.json", nullptr}, {"meta.pkl", nullptr},      {"vocab.json", "merges.txt"},
                             {"encoder.json", "vocab.bpe"}, {"tokenizer.model", nullptr}, {"tokenizer.pkl", nullptr}};

FoundTokenizer read_set(const std::string& dir, const FileSet& set) {
  const std::string a = join_path(dir, set.first);
  const std::string_view first = set.first;
  if (first == "tokenizer.json") return {read_tokenizer_json(a), a};
  if (first == "tokenizer.model") return {read_tiktoken_ranks(a), a};
  if (first == "tokenizer.pkl") return {read_pickled_tokenizer(a), a};
  if (!set.second) return {read_char_meta(a), a};
  const std::string b = join_path(dir, set.second);
  return {read_bpe_files(a, b), a + " + " + b};
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::optional<FoundTokenizer> find_tokenizer_in(const std::string& dir) {
  // tokenizer.json beside vocab.json + merges.txt is one tokenizer written
  // twice, and tokenizer.json is the whole of it; beside a meta.pkl it is
  // another tokenizer.
  if (is_file(join_path(dir, kSets[0].first)) && !is_file(join_path(dir, kSets[1].first)))
    return read_set(dir, kSets[0]);
  std::vector<const FileSet*> complete;
  for (const FileSet& set : kSets) {
    const bool has_first = is_file(join_path(dir, set.first));
    const bool has_second = set.second && is_file(join_path(dir, set.second));
    if (has_first && set.second && !has_second)
      throw Error(join_path(dir, set.first) + ": found without its merges file " + join_path(dir, set.second));
    if (has_first) complete.push_back(&set);
  }
  if (complete.empty()) return std::nullopt;
  if (complete.size() > 1)
    throw Error(dir + ": holds more than one tokenizer (" + std::string(complete[0]->first) + " and " +
                complete[1]->first + "): choose one with --tokenizer FILE");
  return read_set(dir, *complete[0]);
}

FoundTokenizer load_tokenizer_path(const std::string& path) {
  if (is_directory(path)) {
    std::optional<FoundTokenizer> found = find_tokenizer_in(path);
    if (!found)
      throw Error(path +
                  ": no tokenizer files in this directory (expected tokenizer.json, meta.pkl, vocab.json + "
                  "merges.txt, encoder.json + vocab.bpe, a tiktoken tokenizer.model or tokenizer.pkl)");
    return std::move(*found);
  }
  if (!is_file(path)) throw Error(path + ": no such tokenizer file or directory");
  if (ends_with(path, "tokenizer.json")) return {read_tokenizer_json(path), path};
  if (ends_with(path, ".json")) {
    // The merges file beside it: its usual partner by name, else whichever one exists.
    const std::string dir = parent_dir(path);
    std::string merges;
    if (ends_with(path, "vocab.json"))
      merges = join_path(dir, "merges.txt");
    else if (ends_with(path, "encoder.json"))
      merges = join_path(dir, "vocab.bpe");
    else if (is_file(join_path(dir, "merges.txt")))
      merges = join_path(dir, "merges.txt");
    else
      merges = join_path(dir, "vocab.bpe");
    if (!is_file(merges)) throw Error(path + ": its merges file " + merges + " does not exist");
    return {read_bpe_files(path, merges), path + " + " + merges};
  }
  if (ends_with(path, ".txt") || ends_with(path, ".bpe"))
    throw Error(path + ": this is a merges file; give --tokenizer the vocab.json / encoder.json beside it");
  if (ends_with(path, ".model") || ends_with(path, ".tiktoken")) return {read_tiktoken_ranks(path), path};
  return {read_pickled_tokenizer(path), path};
}

}  // namespace mmgpt
