// write_model_file: validates like the reader, lays the file out, and writes
// it atomically (temporary beside the target, fsync, rename). Padding is zero
// so the same model always gives the same bytes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "formats/atomic_file.hpp"
#include "formats/bpe_table.hpp"
#include "formats/error.hpp"
#include "formats/mmgpt_file.hpp"
#include "formats/mmgpt_file_bytes.hpp"
#include "formats/mmgpt_file_layout.hpp"
#include "formats/mmgpt_file_rules.hpp"
#include "formats/string_index.hpp"

namespace mmgpt {
namespace {
using namespace mmgpt_file;

uint64_t checked_add(uint64_t a, uint64_t b, const std::string& path) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw Error(path + ": model is too large for a 64-bit file offset");
  return r;
}

uint64_t align_up(uint64_t v, uint64_t alignment, const std::string& path) {
  return checked_add(v, (alignment - v % alignment) % alignment, path);
}

void validate_inputs(const std::string& path, const ModelConfig& config, const TokenizerData& tokenizer,
                     const std::vector<TensorToWrite>& tensors) {
  validate_config(config, path);
  check_tokenizer(tokenizer, config, path);
  std::vector<NamedShape> named;
  named.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) {
    check_tensor_entry(t.name, static_cast<uint32_t>(t.dtype), file_layout_id(t.dtype, t.layout), t.shape, t.nbytes,
                       path);
    if (t.data == nullptr && !t.produce) throw Error(path + ": tensor '" + t.name + "': data is null");
    named.push_back({&t.name, &t.shape, t.layout, t.dtype});
  }
  check_tensor_set(named, config, path);
}

std::vector<unsigned char> encode_config(const ModelConfig& c) {
  ByteSink s;
  s.u32(c.n_layer), s.u32(c.n_head), s.u32(c.n_embd), s.u32(c.n_ff), s.u32(c.n_ctx), s.u32(c.vocab_size);
  s.u32(std::bit_cast<uint32_t>(c.norm_eps));
  s.u32(static_cast<uint32_t>(c.gelu)), s.u32(static_cast<uint32_t>(c.pos_embedding));
  s.u8(c.qkv_bias), s.u8(c.linear_bias), s.u8(c.norm_bias), s.u8(c.tied_lm_head);
  return std::move(s.bytes);
}

// Section kind 5 (docs/format.md); empty for GPT-2's block, which has none.
std::vector<unsigned char> encode_block(const ModelConfig& c) {
  if (c.is_gpt2_block()) return {};
  const bool v2 = c.has_block_v2();
  ByteSink s;
  s.u32(v2 ? kBlockVersion2 : kBlockVersion), s.u32(static_cast<uint32_t>(c.norm)), s.u32(c.n_kv_head), s.u32(c.head_dim);
  s.u8(c.norm_weight), s.u8(c.has_mlp_bias()), s.u8(c.mlp_gated), s.u8(c.parallel_residual);
  s.u8(c.rope_interleaved), s.u8(c.rope_inverse), s.u8(c.qk_norm_after_rope), s.u8(0);
  s.u32(c.rope_dims), s.u32(static_cast<uint32_t>(c.rope_scaling)), s.u64(std::bit_cast<uint64_t>(c.rope_theta));
  s.u32(std::bit_cast<uint32_t>(c.rope_factor)), s.u32(std::bit_cast<uint32_t>(c.rope_low_freq_factor));
  s.u32(std::bit_cast<uint32_t>(c.rope_high_freq_factor)), s.u32(c.rope_original_ctx);
  s.u32(static_cast<uint32_t>(c.qk_norm)), s.u32(std::bit_cast<uint32_t>(c.qk_norm_scale));
  s.u32(std::bit_cast<uint32_t>(c.attn_scale)), s.u32(std::bit_cast<uint32_t>(c.logit_softcap));
  s.u64(0);
  if (v2) {
    s.u8(c.embed_norm), s.u8(c.resid_mix), s.u8(0), s.u8(0);
    s.u32(c.smear_channels), s.u32(c.backout_after), s.u32(c.ve_gate_channels);
    s.u32(std::bit_cast<uint32_t>(c.ve_gate_range)), s.u32(0);
    for (uint32_t i = 0; i < c.n_layer; ++i) s.u32(c.window_of(i)), s.u32(c.has_value_embed(i) ? 1 : 0);
  }
  return std::move(s.bytes);
}

std::vector<unsigned char> encode_tokenizer(const TokenizerData& t) {
  ByteSink s;
  s.u32(static_cast<uint32_t>(t.kind)), s.u32(0);
  // Kind Bpe keeps its merges only in its tables, as ids (the section that
  // is read at every load stays as small as the vocabulary).
  const bool merges_here = t.kind != TokenizerKind::Bpe;
  s.u64(static_cast<uint64_t>(t.eos_id)), s.u64(t.tokens.size()), s.u64(merges_here ? t.merges.size() : 0);
  for (const std::string& tok : t.tokens) s.str(tok);
  if (merges_here)
    for (const auto& [a, b] : t.merges) s.str(a), s.str(b);
  return std::move(s.bytes);
}

// The tokenizer tables section of a GPT-2 BPE tokenizer (docs/format.md);
// empty (no section) when a merge rule names a string that is not a token:
// such a file converts as before, and loading it names the rule.
std::vector<unsigned char> encode_tokenizer_tables(const TokenizerData& t) {
  BpeTables tables;
  try {
    tables = BpeTables::build(t.tokens, t.merges);
  } catch (const Error&) {
    return {};
  }
  ByteSink s;
  s.u32(kTablesGpt2Bpe), s.u32(0);
  s.u64(t.tokens.size()), s.u64(tables.keys.size());
  for (int32_t id : tables.byte_id) s.u32(static_cast<uint32_t>(id));
  for (uint64_t k : tables.keys) s.u64(k);
  for (const BpeMerge& m : tables.merges) s.u32(static_cast<uint32_t>(m.rank)), s.u32(static_cast<uint32_t>(m.id));
  std::vector<std::string> bytes;
  bytes.reserve(t.tokens.size());
  uint64_t offset = 0;
  s.u64(0);
  for (const std::string& tok : t.tokens) {
    bytes.push_back(bpe_token_bytes(tok));
    offset += bytes.back().size();
    s.u64(offset);
  }
  for (const std::string& b : bytes) s.bytes.insert(s.bytes.end(), b.begin(), b.end());
  return std::move(s.bytes);
}

// The tokenizer pipeline section (kind Bpe only; empty otherwise).
std::vector<unsigned char> encode_pipeline(const TokenizerData& t) {
  if (t.kind != TokenizerKind::Bpe) return {};
  ByteSink s;
  s.u32(kPipelineVersion), s.u32(0), s.u64(t.pipeline.size());
  s.bytes.insert(s.bytes.end(), t.pipeline.begin(), t.pipeline.end());
  return std::move(s.bytes);
}

// The tables of a tokenizer.json BPE (table kind 2, docs/format.md).
std::vector<unsigned char> encode_bpe_tables(const TokenizerData& t, const std::string& path) {
  const size_t n = t.tokens.size();
  if (t.keys.size() != n || t.bytes.size() != n)
    throw Error(path + ": the tokenizer's keys or bytes do not cover its " + std::to_string(n) + " tokens");
  // The merges name tokens of the model's vocabulary only: those with a key.
  std::vector<std::string_view> model(n);
  for (size_t i = 0; i < n; ++i)
    if (!t.keys[i].empty()) model[i] = t.tokens[i];
  std::vector<std::pair<std::string_view, std::string_view>> rules(t.merges.begin(), t.merges.end());
  const BpeTables tables = BpeTables::build(model, rules, ByteTokens::Gpt2, t.merge_ranks);
  // Every stored rank is below the merge count (a file read back keeps its ranks, repeated rules left out).
  uint64_t merge_count = t.merges.size();
  for (int32_t r : t.merge_ranks) merge_count = std::max(merge_count, uint64_t(r) + 1);
  StringIndex index;
  index.build(n, [&t](size_t i) { return std::string_view(t.keys[i]); });
  const std::vector<int32_t>& slots = index.slots();
  ByteSink s;
  s.u32(kTablesBpe), s.u32(0);
  s.u64(n), s.u64(tables.keys.size());
  for (int32_t id : t.byte_ids) s.u32(static_cast<uint32_t>(id));
  s.u64(merge_count), s.u64(slots.size());
  for (uint64_t k : tables.keys) s.u64(k);
  for (const BpeMerge& m : tables.merges) s.u32(static_cast<uint32_t>(m.rank)), s.u32(static_cast<uint32_t>(m.id));
  for (const std::vector<std::string>* blob : {&t.bytes, &t.keys}) {
    uint64_t offset = 0;
    s.u64(0);
    for (const std::string& b : *blob) s.u64(offset += b.size());
  }
  for (int32_t id : slots) s.u32(static_cast<uint32_t>(id));
  for (const std::vector<std::string>* blob : {&t.bytes, &t.keys})
    for (const std::string& b : *blob) s.bytes.insert(s.bytes.end(), b.begin(), b.end());
  return std::move(s.bytes);
}

// Everything before the first tensor: header, section table, config,
// tokenizer, directory; each section starts 8-aligned. Fills `offsets` with
// each tensor's data offset and returns the image with the total file size.
std::vector<unsigned char> build_metadata(const ModelConfig& config, const TokenizerData& tokenizer,
                                          const std::vector<TensorToWrite>& tensors, std::vector<uint64_t>& offsets,
                                          uint64_t& file_size, const std::string& path) {
  const std::vector<unsigned char> cfg = encode_config(config);
  const std::vector<unsigned char> tok = encode_tokenizer(tokenizer);
  const std::vector<unsigned char> tables = tokenizer.kind == TokenizerKind::Gpt2Bpe ? encode_tokenizer_tables(tokenizer)
                                            : tokenizer.kind == TokenizerKind::Bpe   ? encode_bpe_tables(tokenizer, path)
                                                                                     : std::vector<unsigned char>{};
  const std::vector<unsigned char> block = encode_block(config);
  const std::vector<unsigned char> pipeline = encode_pipeline(tokenizer);
  const uint64_t table = kHeaderSize, n_sections = 3 + !tables.empty() + !block.empty() + !pipeline.empty();
  const uint64_t cfg_off = table + n_sections * kSectionEntrySize;
  const uint64_t block_off = align_up(cfg_off + cfg.size(), 8, path);
  const uint64_t tok_off = align_up(block_off + block.size(), 8, path);
  const uint64_t tables_off = align_up(tok_off + tok.size(), 8, path);
  const uint64_t pipeline_off = align_up(tables_off + tables.size(), 8, path);
  const uint64_t dir_off = align_up(pipeline_off + pipeline.size(), 8, path);
  uint64_t dir_size = 8;
  for (const TensorToWrite& t : tensors) dir_size += 4 + t.name.size() + 12 + 8 * t.shape.size() + 16;

  uint64_t cursor = dir_off + dir_size;
  offsets.clear();
  for (const TensorToWrite& t : tensors) {
    cursor = align_up(cursor, required_alignment(t.nbytes), path);
    offsets.push_back(cursor);
    cursor = checked_add(cursor, t.nbytes, path);
  }
  file_size = cursor;

  ByteSink s;
  s.bytes.insert(s.bytes.end(), std::begin(kMagic), std::end(kMagic));
  s.u32(kFormatVersion), s.u32(kByteOrderMark), s.u32(kHeaderSize), s.u32(n_sections);
  s.u64(table), s.u64(file_size);
  s.pad_to(kHeaderSize);
  const std::pair<uint32_t, std::pair<uint64_t, uint64_t>> sections[] = {{kSectionConfig, {cfg_off, cfg.size()}},
                                                                         {kSectionTokenizer, {tok_off, tok.size()}},
                                                                         {kSectionTensors, {dir_off, dir_size}}};
  for (const auto& [kind, where] : sections)
    s.u32(kind), s.u32(kSectionFlagRequired), s.u64(where.first), s.u64(where.second), s.u64(0);
  if (!tables.empty())  // optional for GPT-2 BPE (older readers skip it), required for a tokenizer.json BPE
    s.u32(kSectionTokenizerTables), s.u32(tokenizer.kind == TokenizerKind::Bpe ? kSectionFlagRequired : 0),
        s.u64(tables_off), s.u64(tables.size()), s.u64(0);
  if (!block.empty())  // required: it changes how the model runs
    s.u32(kSectionBlock), s.u32(kSectionFlagRequired), s.u64(block_off), s.u64(block.size()), s.u64(0);
  if (!pipeline.empty())  // required: the tokenizer cannot run without it
    s.u32(kSectionTokenizerPipeline), s.u32(kSectionFlagRequired), s.u64(pipeline_off), s.u64(pipeline.size()),
        s.u64(0);
  s.bytes.insert(s.bytes.end(), cfg.begin(), cfg.end());
  s.pad_to(8);
  s.bytes.insert(s.bytes.end(), block.begin(), block.end());
  s.pad_to(8);
  s.bytes.insert(s.bytes.end(), tok.begin(), tok.end());
  s.pad_to(8);
  s.bytes.insert(s.bytes.end(), tables.begin(), tables.end());
  s.pad_to(8);
  s.bytes.insert(s.bytes.end(), pipeline.begin(), pipeline.end());
  s.pad_to(8);
  s.u64(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    s.str(t.name);
    s.u32(static_cast<uint32_t>(t.dtype)), s.u32(file_layout_id(t.dtype, t.layout)), s.u32(t.shape.size());
    for (uint64_t d : t.shape) s.u64(d);
    s.u64(offsets[i]), s.u64(t.nbytes);
  }
  return std::move(s.bytes);
}

}  // namespace

void write_model_file(const std::string& path, const ModelConfig& config, const TokenizerData& tokenizer,
                      const std::vector<TensorToWrite>& tensors) {
  validate_inputs(path, config, tokenizer, tensors);
  std::vector<uint64_t> offsets;
  uint64_t file_size = 0;
  const std::vector<unsigned char> meta = build_metadata(config, tokenizer, tensors, offsets, file_size, path);

  AtomicFile out(path);
  out.write(meta.data(), meta.size());
  uint64_t written = meta.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    out.zeros(offsets[i] - written);
    if (t.data) {
      out.write(t.data, t.nbytes);
    } else {
      uint64_t put = 0;
      t.produce([&](const void* bytes, uint64_t n) {
        if (n > t.nbytes - put)
          throw Error(path + ": tensor '" + t.name + "': more than its " + std::to_string(t.nbytes) + " bytes produced");
        out.write(bytes, n);
        put += n;
      });
      if (put != t.nbytes)
        throw Error(path + ": tensor '" + t.name + "': " + std::to_string(put) + " of its " + std::to_string(t.nbytes) +
                    " bytes produced");
    }
    written = offsets[i] + t.nbytes;
  }
  out.commit();
}

}  // namespace mmgpt
