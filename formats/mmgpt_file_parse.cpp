// The validating .mmgpt parser. Order matters: each stage only trusts what an
// earlier stage checked, and every count read from the file is bounded by the
// bytes that could hold it before anything is allocated for it.
#include "formats/mmgpt_file_parse.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "formats/bpe_table.hpp"
#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "formats/mmgpt_file_bytes.hpp"
#include "formats/mmgpt_file_layout.hpp"
#include "formats/mmgpt_file_rules.hpp"

namespace mmgpt::mmgpt_file {
namespace {

std::string hex32(uint32_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 7; i >= 0; --i) s += digits[(v >> (4 * i)) & 0xF];
  return s;
}

// A byte range [begin, end) of the file that something claims.
struct Region {
  std::string what;
  uint64_t begin, end;
};

struct SectionRef {
  uint64_t offset = 0, size = 0;
  bool present = false;
};

struct Sections {
  SectionRef config, tokenizer, tensors, tables, block, pipeline;
};

void check_header(const unsigned char* p, uint64_t size, const std::string& path) {
  if (size == 0) throw Error(path + ": file is empty (0 bytes), not a .mmgpt file");
  if (size < sizeof(kMagic) || std::memcmp(p + kOffMagic, kMagic, sizeof(kMagic)) != 0)
    throw Error(path + ": not a .mmgpt file (bad magic; expected \"MMGPT\\r\\n\\x1a\" at offset 0)");
  if (size < kHeaderSize)
    throw Error(path + ": file is " + std::to_string(size) + " bytes, smaller than the " + std::to_string(kHeaderSize) +
                "-byte header (truncated)");
  const uint32_t bom = load_u32(p + kOffByteOrder);
  if (bom != kByteOrderMark)
    throw Error(path + ": byte-order mark is " + hex32(bom) + " (expected " + hex32(kByteOrderMark) +
                "; the file is not little-endian .mmgpt or is corrupt)");
  const uint32_t version = load_u32(p + kOffVersion);
  if (version == 0 || version > kFormatVersion)
    throw Error(path + ": format version " + std::to_string(version) + " is not supported (this mmgpt reads 1 to " +
                std::to_string(kFormatVersion) + ")");
  const uint64_t declared = load_u64(p + kOffFileSize);
  if (declared != size)
    throw Error(path + ": header field file_size is " + std::to_string(declared) + " but the file is " +
                std::to_string(size) + " bytes (truncated or corrupt)");
  const uint32_t header_size = load_u32(p + kOffHeaderSize);
  if (header_size < kHeaderSize || header_size > size)
    throw Error(path + ": header field header_size is " + std::to_string(header_size) + " (must be " +
                std::to_string(kHeaderSize) + " to the file size " + std::to_string(size) + ")");
}

// Checks that [offset, offset + length) lies inside the file, overflow-safely.
void check_in_file(const std::string& what, uint64_t offset, uint64_t length, uint64_t size) {
  uint64_t end;
  if (__builtin_add_overflow(offset, length, &end) || end > size)
    throw Error(what + ": offset " + std::to_string(offset) + " + size " + std::to_string(length) +
                " exceeds file size " + std::to_string(size));
}

Sections read_section_table(const unsigned char* p, uint64_t size, const std::string& path,
                            std::vector<Region>& regions) {
  const uint32_t header_size = load_u32(p + kOffHeaderSize);
  const uint32_t count = load_u32(p + kOffSectionCount);
  const uint64_t table = load_u64(p + kOffSectionTable);
  if (count == 0 || count > kMaxSections)
    throw Error(path + ": header field section_count is " + std::to_string(count) + " (must be 1 to " +
                std::to_string(kMaxSections) + ")");
  if (table < header_size)
    throw Error(path + ": header field section_table_offset " + std::to_string(table) +
                " points inside the header (header_size " + std::to_string(header_size) + ")");
  const uint64_t table_bytes = uint64_t(count) * kSectionEntrySize;  // <= 64 * 32: cannot overflow
  check_in_file(path + ": section table", table, table_bytes, size);
  regions.push_back({"header", 0, header_size});
  regions.push_back({"section table", table, table + table_bytes});

  Sections s;
  for (uint32_t i = 0; i < count; ++i) {
    const unsigned char* e = p + table + uint64_t(i) * kSectionEntrySize;
    const uint32_t kind = load_u32(e), flags = load_u32(e + 4);
    const uint64_t offset = load_u64(e + 8), length = load_u64(e + 16);
    const std::string what = path + ": section " + std::to_string(i) + " (kind " + std::to_string(kind) + ")";
    check_in_file(what, offset, length, size);
    regions.push_back({"section kind " + std::to_string(kind), offset, offset + length});
    SectionRef* slot = kind == kSectionConfig            ? &s.config
                       : kind == kSectionTokenizer       ? &s.tokenizer
                       : kind == kSectionTensors         ? &s.tensors
                       : kind == kSectionTokenizerTables ? &s.tables
                       : kind == kSectionBlock           ? &s.block
                       : kind == kSectionTokenizerPipeline ? &s.pipeline
                                                         : nullptr;
    if (!slot) {
      if (flags & kSectionFlagRequired)
        throw Error(what + ": unknown section kind " + std::to_string(kind) +
                    " is marked required (the file needs a newer mmgpt)");
      continue;  // optional extension from a later writer: skipped unread
    }
    if (slot->present) throw Error(what + ": section kind " + std::to_string(kind) + " appears more than once");
    *slot = {offset, length, true};
  }
  if (!s.config.present) throw Error(path + ": missing config section (kind 1)");
  if (!s.tokenizer.present) throw Error(path + ": missing tokenizer section (kind 2)");
  if (!s.tensors.present) throw Error(path + ": missing tensor directory section (kind 3)");
  return s;
}

bool read_bool(ByteCursor& c, const char* field) {
  const uint8_t v = c.u8(field);
  if (v > 1) throw Error(c.where() + ": field " + field + " is " + std::to_string(v) + " (must be 0 or 1)");
  return v == 1;
}

ModelConfig read_config(const unsigned char* p, SectionRef ref, const std::string& path) {
  if (ref.size != kConfigSize)
    throw Error(path + ": config section size is " + std::to_string(ref.size) + " (version 1 requires " +
                std::to_string(kConfigSize) + ")");
  ByteCursor c(p, ref.offset, ref.offset + ref.size, path + ": config section");
  ModelConfig cfg;
  cfg.n_layer = c.u32("n_layer");
  cfg.n_head = c.u32("n_head");
  cfg.n_embd = c.u32("n_embd");
  cfg.n_ff = c.u32("n_ff");
  cfg.n_ctx = c.u32("n_ctx");
  cfg.vocab_size = c.u32("vocab_size");
  cfg.norm_eps = c.f32("norm_eps");
  // Enum-class values with a fixed uint32_t base may hold any id; validate_config names unknown ones.
  cfg.gelu = static_cast<GeluKind>(c.u32("gelu"));
  cfg.pos_embedding = static_cast<PosEmbedding>(c.u32("pos_embedding"));
  cfg.qkv_bias = read_bool(c, "qkv_bias");
  cfg.linear_bias = read_bool(c, "linear_bias");
  cfg.norm_bias = read_bool(c, "norm_bias");
  cfg.tied_lm_head = read_bool(c, "tied_lm_head");
  return cfg;
}

void require_consumed(const ByteCursor& c);

// Section kind 5: the block's parts beyond GPT-2's, into `cfg`.
void read_block(const unsigned char* p, SectionRef ref, ModelConfig& cfg, const std::string& path) {
  ByteCursor c(p, ref.offset, ref.offset + ref.size, path + ": block config section");
  const uint32_t version = c.u32("version");
  if (version != kBlockVersion && version != kBlockVersion2)
    throw Error(c.where() + ": version " + std::to_string(version) + " is not supported (this mmgpt reads " +
                std::to_string(kBlockVersion) + " and " + std::to_string(kBlockVersion2) +
                "; the file needs a newer mmgpt)");
  const uint64_t size =
      version == kBlockVersion ? kBlockSize : kBlockSize + kBlockV2Extra + kBlockV2PerLayer * uint64_t{cfg.n_layer};
  if (ref.size != size)
    throw Error(c.where() + ": size is " + std::to_string(ref.size) + " (version " + std::to_string(version) +
                " with " + std::to_string(cfg.n_layer) + " layers requires " + std::to_string(size) + ")");
  cfg.norm = static_cast<NormKind>(c.u32("norm"));
  cfg.n_kv_head = c.u32("n_kv_head");
  cfg.head_dim = c.u32("head_dim");
  cfg.norm_weight = read_bool(c, "norm_weight");
  cfg.mlp_bias = read_bool(c, "mlp_bias");
  cfg.mlp_gated = read_bool(c, "mlp_gated");
  cfg.parallel_residual = read_bool(c, "parallel_residual");
  cfg.rope_interleaved = read_bool(c, "rope_interleaved");
  cfg.rope_inverse = read_bool(c, "rope_inverse");
  cfg.qk_norm_after_rope = read_bool(c, "qk_norm_after_rope");
  if (c.u8("reserved") != 0) throw Error(c.where() + ": reserved byte 23 is not 0");
  cfg.rope_dims = c.u32("rope_dims");
  cfg.rope_scaling = static_cast<RopeScaling>(c.u32("rope_scaling"));
  cfg.rope_theta = std::bit_cast<double>(c.u64("rope_theta"));
  cfg.rope_factor = c.f32("rope_factor");
  cfg.rope_low_freq_factor = c.f32("rope_low_freq_factor");
  cfg.rope_high_freq_factor = c.f32("rope_high_freq_factor");
  cfg.rope_original_ctx = c.u32("rope_original_ctx");
  cfg.qk_norm = static_cast<QkNorm>(c.u32("qk_norm"));
  cfg.qk_norm_scale = c.f32("qk_norm_scale");
  cfg.attn_scale = c.f32("attn_scale");
  cfg.logit_softcap = c.f32("logit_softcap");
  if (c.u64("reserved") != 0) throw Error(c.where() + ": reserved bytes 72..79 are not 0");
  if (version == kBlockVersion2) {
    cfg.embed_norm = read_bool(c, "embed_norm");
    cfg.resid_mix = read_bool(c, "resid_mix");
    if (c.u8("reserved") != 0 || c.u8("reserved") != 0) throw Error(c.where() + ": reserved bytes 82..83 are not 0");
    cfg.smear_channels = c.u32("smear_channels");
    cfg.backout_after = c.u32("backout_after");
    cfg.ve_gate_channels = c.u32("ve_gate_channels");
    cfg.ve_gate_range = c.f32("ve_gate_range");
    if (c.u32("reserved") != 0) throw Error(c.where() + ": reserved bytes 100..103 are not 0");
    bool windows = false, ve = false;
    std::vector<uint32_t> window(cfg.n_layer);
    std::vector<uint8_t> flags(cfg.n_layer);
    for (uint32_t i = 0; i < cfg.n_layer; ++i) {
      window[i] = c.u32("attn_window");
      const uint32_t f = c.u32("layer flags");
      if (f > 1) throw Error(c.where() + ": layer " + std::to_string(i) + " has unknown flags " + std::to_string(f));
      flags[i] = static_cast<uint8_t>(f);
      windows = windows || window[i] != 0;
      ve = ve || f != 0;
    }
    if (windows) cfg.attn_window = std::move(window);
    if (ve) cfg.value_embed = std::move(flags);
  }
  require_consumed(c);
}

// A length-prefixed string, in place. `field()` names it in an error message;
// it is called only on the way to one, as a vocabulary has 10^5 strings.
template <class Field>
std::string_view read_string(ByteCursor& c, const Field& field) {
  if (c.remaining() >= 4) {
    const uint32_t len = c.peek_u32();
    if (len <= kMaxStringBytes && len <= c.remaining() - 4) {
      static const std::string length_name = "string length", string_name = "string";  // built once, not per string
      c.u32(length_name);  // neither read can fail: checked above
      return c.view(len, string_name);
    }
  }
  const std::string name = field();
  const uint32_t len = c.u32(name + " length");
  if (len > kMaxStringBytes)
    throw Error(c.where() + ": " + name + " length " + std::to_string(len) + " exceeds limit " +
                std::to_string(kMaxStringBytes));
  return c.view(len, name);
}

void require_consumed(const ByteCursor& c) {
  if (c.remaining() != 0)
    throw Error(c.where() + ": " + std::to_string(c.remaining()) + " unexpected trailing bytes at offset " +
                std::to_string(c.pos()));
}

// Reads tokens into the empty `tokens` while each one's length is in bounds
// (non-zero, at most kMaxStringBytes, inside the section), in one tight pass:
// a vocabulary has 10^5 strings. Returns how many of them, from the first, are
// also valid UTF-8: all of check_tokenizer's rules hold for those, so it need
// not read them again. The caller reads and checks the rest, and names what is
// wrong.
size_t read_checked_tokens(const unsigned char* p, ByteCursor& c, uint64_t n_tokens,
                           std::vector<std::string_view>& tokens) {
  const unsigned char* at = p + c.pos();
  const unsigned char* const end = at + c.remaining();
  std::vector<size_t> long_tokens;  // length 0x80 or more: its low byte may not be ASCII
  while (tokens.size() < n_tokens && end - at >= 4) {
    const uint32_t len = load_u32(at);
    if (len == 0 || len > kMaxStringBytes || len > static_cast<uint64_t>(end - at - 4)) break;
    if (len >= 0x80) long_tokens.push_back(tokens.size());
    tokens.emplace_back(reinterpret_cast<const char*>(at + 4), len);
    at += 4 + uint64_t{len};
  }
  c.view(static_cast<uint64_t>(at - (p + c.pos())), "tokens");  // consumed: cannot fail
  // Tokens [from, to) lie in the section as one range of bytes, each token's
  // length between it and the one before. A length below 0x80 is the bytes
  // (length, 0, 0, 0), all ASCII, so with such lengths the range is valid
  // UTF-8 exactly when each token is: ASCII inside a character is an error,
  // and after a whole one it starts none. A long token starts a new range.
  auto range_valid = [&tokens](size_t from, size_t to) {
    if (from == to) return true;
    const char* b = tokens[from].data();
    return valid_utf8({b, static_cast<size_t>(tokens[to - 1].data() + tokens[to - 1].size() - b)});
  };
  bool valid = true;
  size_t from = 0;
  for (const size_t i : long_tokens) {
    valid = valid && range_valid(from, i);
    from = i;
  }
  if (valid && range_valid(from, tokens.size())) return tokens.size();
  size_t good = 0;  // some token is not valid: count up to it
  while (good < tokens.size() && valid_utf8(tokens[good])) ++good;
  return good;
}

StoredTokenizer read_tokenizer(const unsigned char* p, SectionRef ref, const ModelConfig& cfg, const std::string& path) {
  ByteCursor c(p, ref.offset, ref.offset + ref.size, path + ": tokenizer section");
  StoredTokenizer tok;
  tok.kind = static_cast<TokenizerKind>(c.u32("kind"));
  c.u32("reserved");
  tok.eos_id = c.i64("eos_id");
  const uint64_t n_tokens = c.u64("token_count");
  const uint64_t n_merges = c.u64("merge_count");
  // Bound the counts before allocating: by the config, and by the bytes left
  // (each token needs >= 4 bytes, each merge >= 8).
  if (n_tokens > cfg.vocab_size)
    throw Error(c.where() + ": token_count " + std::to_string(n_tokens) + " exceeds config vocab_size " +
                std::to_string(cfg.vocab_size));
  if (n_tokens > c.remaining() / 4)
    throw Error(c.where() + ": token_count " + std::to_string(n_tokens) + " cannot fit in the " +
                std::to_string(c.remaining()) + " bytes left in the section");
  if (n_merges > kMaxMerges || n_merges > (c.remaining() - 4 * n_tokens) / 8)
    throw Error(c.where() + ": merge_count " + std::to_string(n_merges) + " cannot fit in the section (" +
                std::to_string(c.remaining()) + " bytes left)");
  tok.tokens.reserve(n_tokens);
  const size_t checked_tokens = read_checked_tokens(p, c, n_tokens, tok.tokens);
  for (uint64_t i = tok.tokens.size(); i < n_tokens; ++i)
    tok.tokens.push_back(read_string(c, [i] { return "token " + std::to_string(i); }));
  tok.merges.reserve(n_merges);
  for (uint64_t i = 0; i < n_merges; ++i) {
    const std::string_view a = read_string(c, [i] { return "merge " + std::to_string(i) + " left part"; });
    const std::string_view b = read_string(c, [i] { return "merge " + std::to_string(i) + " right part"; });
    tok.merges.emplace_back(a, b);
  }
  require_consumed(c);
  check_tokenizer(tok, cfg, path, checked_tokens);
  return tok;
}

// Section kind 6: its header and size; the JSON is read by the tokenizer (text/hf_tokenizer.hpp).
std::string_view read_tokenizer_pipeline(const unsigned char* p, SectionRef ref, const StoredTokenizer& tok,
                                         const std::string& path) {
  const std::string where = path + ": tokenizer pipeline section";
  if (tok.kind != TokenizerKind::Bpe)
    throw Error(where + ": present, but the tokenizer is not a tokenizer.json BPE (kind " +
                std::to_string(static_cast<uint32_t>(tok.kind)) + ")");
  ByteCursor c(p, ref.offset, ref.offset + ref.size, where);
  const uint32_t version = c.u32("version");
  if (version != kPipelineVersion)
    throw Error(where + ": version " + std::to_string(version) + " is unknown (this reader knows 1; the file needs a "
                "newer mmgpt)");
  c.u32("reserved");
  const uint64_t n = c.u64("byte_count");
  if (n > kMaxPipelineBytes || n != c.remaining())
    throw Error(where + ": byte_count " + std::to_string(n) + " does not match the " + std::to_string(c.remaining()) +
                " bytes left (limit " + std::to_string(kMaxPipelineBytes) + ")");
  return c.view(n, "pipeline JSON");
}

// Section kind 4: checked in full (formats/bpe_table.hpp's rules, sizes, offsets)
// before any pointer into it is formed.
// Offsets [count + 1] into a blob of `blob` bytes: from 0, never decreasing, ending at blob.
void check_offsets(const uint64_t* offsets, uint64_t count, uint64_t blob, const std::string& where,
                   const char* what) {
  // First the whole rule at once, without a branch per offset (a vocabulary
  // has 10^5 of them): while every offset is below 2^63, one is below the one
  // before it exactly when their difference has its top bit set; rising from
  // 0 to blob, none is past blob. Otherwise the loop below names the offset.
  uint64_t bits = 0;
  for (uint64_t i = 0; i < count; ++i) bits |= offsets[i + 1] | (offsets[i + 1] - offsets[i]);
  if (offsets[0] == 0 && offsets[count] == blob && bits >> 63 == 0) return;
  if (offsets[0] != 0) throw Error(where + ": the first token's " + what + " do not start at 0");
  for (uint64_t i = 0; i < count; ++i)
    if (offsets[i + 1] < offsets[i] || offsets[i + 1] > blob)
      throw Error(where + ": the " + what + " of token " + std::to_string(i) + " end at " +
                  std::to_string(offsets[i + 1]) + ", outside [" + std::to_string(offsets[i]) + ", " +
                  std::to_string(blob) + "]");
  if (offsets[count] != blob)
    throw Error(where + ": " + std::to_string(blob - offsets[count]) + " bytes after the last token's " + what);
}

// Table kind 2 (docs/format.md): sizes, byte ids and offsets here; the merge
// table and the vocabulary index where they are read.
StoredBpeTables read_bpe_tables_v2(const unsigned char* p, SectionRef ref, uint64_t tokens, uint64_t cap,
                                   const std::string& where) {
  if (ref.size < kTables2OffKeys)
    throw Error(where + ": " + std::to_string(ref.size) + " bytes cannot hold the table header");
  const unsigned char* base = p + ref.offset;
  const uint64_t merges = load_u64(base + kTables2OffMergeCount), vcap = load_u64(base + kTables2OffVocabCapacity);
  if (merges > kMaxMerges) throw Error(where + ": merge_count " + std::to_string(merges) + " exceeds 2^24");
  if (vcap < 16 || vcap > kMaxVocabCapacity || (vcap & (vcap - 1)) != 0 || vcap < 2 * tokens)
    throw Error(where + ": vocab_capacity " + std::to_string(vcap) +
                " is not a power of two from 16 to 2^27 and at least twice the token count");
  // Bounded by the checks above, so no overflow.
  const uint64_t byte_offsets_at = kTables2OffKeys + 16 * cap, key_offsets_at = byte_offsets_at + 8 * (tokens + 1);
  const uint64_t slots_at = key_offsets_at + 8 * (tokens + 1), blobs_at = slots_at + 4 * vcap;
  if (ref.size < blobs_at)
    throw Error(where + ": " + std::to_string(ref.size) + " bytes cannot hold the tables (" + std::to_string(blobs_at) +
                " needed)");
  StoredBpeTables t;
  t.table_kind = kTablesBpe;
  t.token_count = tokens;
  t.merge_count = merges;
  t.table.byte_id = reinterpret_cast<const int32_t*>(base + kTablesOffByteIds);
  t.table.keys = {reinterpret_cast<const uint64_t*>(base + kTables2OffKeys), static_cast<size_t>(cap)};
  t.table.merges = {reinterpret_cast<const BpeMerge*>(base + kTables2OffKeys + 8 * cap), static_cast<size_t>(cap)};
  t.table.id_limit = tokens;
  check_byte_ids(t.table.byte_id, tokens, where);
  t.byte_offsets = reinterpret_cast<const uint64_t*>(base + byte_offsets_at);
  t.key_offsets = reinterpret_cast<const uint64_t*>(base + key_offsets_at);
  t.vocab_slots = {reinterpret_cast<const int32_t*>(base + slots_at), static_cast<size_t>(vcap)};
  const uint64_t bytes_size = t.byte_offsets[tokens], blobs = ref.size - blobs_at;
  if (bytes_size > blobs)
    throw Error(where + ": the tokens' bytes (" + std::to_string(bytes_size) + ") do not fit in the " +
                std::to_string(blobs) + " bytes left");
  check_offsets(t.byte_offsets, tokens, bytes_size, where, "bytes");
  check_offsets(t.key_offsets, tokens, blobs - bytes_size, where, "keys");
  t.bytes = reinterpret_cast<const char*>(base + blobs_at);
  t.keys = t.bytes + bytes_size;
  return t;
}

StoredBpeTables read_tokenizer_tables(const unsigned char* p, SectionRef ref, const StoredTokenizer& tok,
                                      const std::string& path) {
  const std::string where = path + ": tokenizer tables section";
  if (tok.kind != TokenizerKind::Gpt2Bpe && tok.kind != TokenizerKind::Bpe)
    throw Error(where + ": present, but the tokenizer is not a BPE (kind " +
                std::to_string(static_cast<uint32_t>(tok.kind)) + ")");
  if (ref.offset % 8 != 0) throw Error(where + ": offset " + std::to_string(ref.offset) + " is not a multiple of 8");
  ByteCursor c(p, ref.offset, ref.offset + ref.size, where);
  const uint32_t kind = c.u32("kind");
  const uint32_t want = tok.kind == TokenizerKind::Bpe ? kTablesBpe : kTablesGpt2Bpe;
  if (kind != want)
    throw Error(where + ": table kind " + std::to_string(kind) + " is not " + std::to_string(want) +
                " (1 = GPT-2 BPE, 2 = tokenizer.json BPE)");
  c.u32("reserved");
  const uint64_t tokens = c.u64("token_count"), cap = c.u64("capacity");
  if (tokens != tok.tokens.size())
    throw Error(where + ": token_count " + std::to_string(tokens) + " differs from the tokenizer's " +
                std::to_string(tok.tokens.size()));
  if (cap < 16 || cap > kMaxTableCapacity || (cap & (cap - 1)) != 0)
    throw Error(where + ": capacity " + std::to_string(cap) + " is not a power of two from 16 to 2^26");
  if (kind == kTablesBpe) return read_bpe_tables_v2(p, ref, tokens, cap, where);
  // Fixed part, tables and offsets: bounded by the checks above, so no overflow.
  const uint64_t offsets_at = kTablesOffKeys + 16 * cap, blob_at = offsets_at + 8 * (tokens + 1);
  if (ref.size < blob_at)
    throw Error(where + ": " + std::to_string(ref.size) + " bytes cannot hold the tables (" + std::to_string(blob_at) +
                " needed)");
  const unsigned char* base = p + ref.offset;
  StoredBpeTables t;
  t.token_count = tokens;
  t.table.byte_id = reinterpret_cast<const int32_t*>(base + kTablesOffByteIds);
  t.table.keys = {reinterpret_cast<const uint64_t*>(base + kTablesOffKeys), static_cast<size_t>(cap)};
  t.table.merges = {reinterpret_cast<const BpeMerge*>(base + kTablesOffKeys + 8 * cap), static_cast<size_t>(cap)};
  t.byte_offsets = reinterpret_cast<const uint64_t*>(base + offsets_at);
  t.bytes = reinterpret_cast<const char*>(base + blob_at);
  check_bpe_tables(t.table, tokens, tok.merges.size(), where);
  const uint64_t blob = ref.size - blob_at;
  if (t.byte_offsets[0] != 0) throw Error(where + ": the first token's bytes do not start at 0");
  for (uint64_t i = 0; i < tokens; ++i)
    if (t.byte_offsets[i + 1] < t.byte_offsets[i] || t.byte_offsets[i + 1] > blob)
      throw Error(where + ": the bytes of token " + std::to_string(i) + " end at " +
                  std::to_string(t.byte_offsets[i + 1]) + ", outside [" + std::to_string(t.byte_offsets[i]) + ", " +
                  std::to_string(blob) + "]");
  if (t.byte_offsets[tokens] != blob)
    throw Error(where + ": " + std::to_string(blob - t.byte_offsets[tokens]) + " bytes after the last token's");
  return t;
}

std::vector<TensorView> read_directory(const unsigned char* p, uint64_t size, SectionRef ref, const std::string& path,
                                       std::vector<Region>& regions) {
  ByteCursor c(p, ref.offset, ref.offset + ref.size, path + ": tensor directory");
  const uint64_t count = c.u64("tensor_count");
  if (count > c.remaining() / kMinTensorEntrySize)
    throw Error(c.where() + ": tensor_count " + std::to_string(count) + " cannot fit in the " +
                std::to_string(c.remaining()) + " bytes left in the section");
  std::vector<TensorView> out;
  out.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const std::string entry = "entry " + std::to_string(i);
    const uint32_t name_len = c.u32(entry + " name length");
    if (name_len == 0 || name_len > kMaxNameBytes)
      throw Error(c.where() + ": " + entry + " name length " + std::to_string(name_len) + " is out of range (1 to " +
                  std::to_string(kMaxNameBytes) + ")");
    TensorView t;
    t.name = c.bytes(name_len, entry + " name");
    const std::string field = "tensor '" + t.name + "'";
    const uint32_t dtype = c.u32(field + " dtype");
    const uint32_t layout = c.u32(field + " layout");
    const uint32_t ndim = c.u32(field + " ndim");
    if (ndim > kMaxDims)
      throw Error(path + ": " + field + ": ndim " + std::to_string(ndim) + " exceeds limit " +
                  std::to_string(kMaxDims));
    for (uint32_t d = 0; d < ndim; ++d) t.shape.push_back(c.u64(field + " dim " + std::to_string(d)));
    t.offset = c.u64(field + " offset");
    t.nbytes = c.u64(field + " nbytes");
    check_tensor_entry(t.name, dtype, layout, t.shape, t.nbytes, path);
    t.dtype = static_cast<WeightType>(dtype);
    t.layout = memory_layout(layout);
    const uint64_t align = required_alignment(t.nbytes);
    if (t.offset % align != 0)
      throw Error(path + ": " + field + ": offset " + std::to_string(t.offset) + " is not a multiple of " +
                  std::to_string(align) + " (required for a tensor of " + std::to_string(t.nbytes) + " bytes)");
    check_in_file(path + ": " + field, t.offset, t.nbytes, size);
    regions.push_back({field, t.offset, t.offset + t.nbytes});
    out.push_back(std::move(t));
  }
  require_consumed(c);
  return out;
}

// No byte of the file may be claimed twice (header, section table, sections, tensors).
void check_no_overlap(std::vector<Region>& regions, const std::string& path) {
  std::erase_if(regions, [](const Region& r) { return r.begin == r.end; });
  std::stable_sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < regions.size(); ++i) {
    const Region &a = regions[i - 1], &b = regions[i];
    if (b.begin < a.end)
      throw Error(path + ": " + b.what + " [" + std::to_string(b.begin) + ", " + std::to_string(b.end) + ") overlaps " +
                  a.what + " [" + std::to_string(a.begin) + ", " + std::to_string(a.end) + ")");
  }
}

}  // namespace

ParsedImage parse_image(const unsigned char* p, uint64_t size, const std::string& path) {
  check_header(p, size, path);
  std::vector<Region> regions;
  const Sections s = read_section_table(p, size, path, regions);
  {
    std::vector<Region> sections = regions;  // sections must not overlap before their contents are read
    check_no_overlap(sections, path);
  }
  ParsedImage out;
  out.version = load_u32(p + kOffVersion);
  out.config = read_config(p, s.config, path);
  if (s.block.present) read_block(p, s.block, out.config, path);
  validate_config(out.config, path);
  out.tokenizer = read_tokenizer(p, s.tokenizer, out.config, path);
  if (s.tables.present) out.bpe_tables = read_tokenizer_tables(p, s.tables, out.tokenizer, path);
  if (s.pipeline.present) out.tokenizer.pipeline = read_tokenizer_pipeline(p, s.pipeline, out.tokenizer, path);
  if (out.tokenizer.kind == TokenizerKind::Bpe && (!s.pipeline.present || !s.tables.present))
    throw Error(path + ": the tokenizer is a tokenizer.json BPE but the file lacks its " +
                (s.pipeline.present ? "tables section (kind 4)" : "pipeline section (kind 6)"));
  out.tensors = read_directory(p, size, s.tensors, path, regions);
  check_no_overlap(regions, path);
  std::vector<NamedShape> named;
  named.reserve(out.tensors.size());
  for (const TensorView& t : out.tensors) named.push_back({&t.name, &t.shape, t.layout, t.dtype});
  check_tensor_set(named, out.config, path);
  // Everything is checked: only now form pointers into the image.
  for (TensorView& t : out.tensors) t.data = p + t.offset;
  return out;
}

}  // namespace mmgpt::mmgpt_file
