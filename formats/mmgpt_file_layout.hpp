#pragma once
// Byte-level constants of the .mmgpt format, shared by the reader, the writer
// and the tests that forge corrupt files. docs/format.md is the specification;
// every number here appears there.
#include <cstdint>

namespace mmgpt::mmgpt_file {

// --- fixed header, at offset 0 ------------------------------------------------
// "MMGPT\r\n\x1a": CR LF catches text-mode line-ending conversion, 0x1a stops
// `type` on Windows, and the ASCII prefix makes `head -c 5` readable.
inline constexpr unsigned char kMagic[8] = {'M', 'M', 'G', 'P', 'T', '\r', '\n', 0x1a};
// Written as a little-endian u32; a big-endian writer would produce 01 02 03 04.
inline constexpr uint32_t kByteOrderMark = 0x01020304u;
inline constexpr uint64_t kHeaderSize = 64;  // bytes the v1 header occupies (header_size may be larger)

inline constexpr uint64_t kOffMagic = 0;          // u8[8]
inline constexpr uint64_t kOffVersion = 8;        // u32
inline constexpr uint64_t kOffByteOrder = 12;     // u32
inline constexpr uint64_t kOffHeaderSize = 16;    // u32
inline constexpr uint64_t kOffSectionCount = 20;  // u32
inline constexpr uint64_t kOffSectionTable = 24;  // u64
inline constexpr uint64_t kOffFileSize = 32;      // u64
// 40..63: reserved, written as zero, ignored by readers.

// --- section table: section_count entries of 32 bytes ------------------------
inline constexpr uint64_t kSectionEntrySize = 32;  // u32 kind, u32 flags, u64 offset, u64 size, u64 reserved
inline constexpr uint32_t kMaxSections = 64;
inline constexpr uint32_t kSectionConfig = 1;
inline constexpr uint32_t kSectionTokenizer = 2;
inline constexpr uint32_t kSectionTensors = 3;
// A reader that meets an unknown section kind skips it, unless this flag is set.
inline constexpr uint32_t kSectionFlagRequired = 1;

// --- config section (exactly 40 bytes in version 1) --------------------------
inline constexpr uint64_t kConfigSize = 40;
inline constexpr uint64_t kCfgNLayer = 0;       // u32
inline constexpr uint64_t kCfgNHead = 4;        // u32
inline constexpr uint64_t kCfgNEmbd = 8;        // u32
inline constexpr uint64_t kCfgNFf = 12;         // u32
inline constexpr uint64_t kCfgNCtx = 16;        // u32
inline constexpr uint64_t kCfgVocab = 20;       // u32
inline constexpr uint64_t kCfgNormEps = 24;     // f32 (IEEE 754 binary32)
inline constexpr uint64_t kCfgGelu = 28;        // u32
inline constexpr uint64_t kCfgPosEmb = 32;      // u32
inline constexpr uint64_t kCfgQkvBias = 36;     // u8 0/1
inline constexpr uint64_t kCfgLinearBias = 37;  // u8 0/1
inline constexpr uint64_t kCfgNormBias = 38;    // u8 0/1
inline constexpr uint64_t kCfgTiedHead = 39;    // u8 0/1

// --- block config section (kind 5, required; absent for GPT-2's block) --------
// The parts of a modern block (model_config.hpp). Versioned: version 1 is
// exactly kBlockSize bytes; version 2 (nanochat's additions) is version 1's
// fields followed by kBlockV2Extra bytes and kBlockV2PerLayer per layer. A
// writer uses version 1 unless a version 2 field is set; a reader refuses a
// version it does not know.
inline constexpr uint32_t kSectionBlock = 5;
inline constexpr uint32_t kBlockVersion = 1;
inline constexpr uint32_t kBlockVersion2 = 2;
inline constexpr uint64_t kBlockSize = 80;
inline constexpr uint64_t kBlockV2Extra = 24;
inline constexpr uint64_t kBlockV2PerLayer = 8;
// u32 version, u32 norm, u32 n_kv_head, u32 head_dim,
// u8 norm_weight, u8 mlp_bias, u8 mlp_gated, u8 parallel_residual,
// u8 rope_interleaved, u8 rope_inverse, u8 qk_norm_after_rope, u8 reserved (0),
// u32 rope_dims, u32 rope_scaling, f64 rope_theta,
// f32 rope_factor, f32 rope_low_freq_factor, f32 rope_high_freq_factor, u32 rope_original_ctx,
// u32 qk_norm, f32 qk_norm_scale, f32 attn_scale, f32 logit_softcap, u64 reserved (0)
// version 2, then: u8 embed_norm, u8 resid_mix, u8 reserved (0), u8 reserved (0),
// u32 smear_channels, u32 backout_after, u32 ve_gate_channels, f32 ve_gate_range,
// u32 reserved (0); per layer: u32 attn_window (0: all), u32 flags (bit 0: value embedding)

// --- tokenizer section --------------------------------------------------------
inline constexpr uint64_t kTokFixedSize = 32;  // u32 kind, u32 reserved, i64 eos_id, u64 token_count, u64 merge_count
inline constexpr uint32_t kMaxStringBytes = 4096;  // one token or one merge half
inline constexpr uint64_t kMaxMerges = 1u << 24;

// --- tokenizer tables section (optional, GPT-2 BPE only) ----------------------
// The tables the tokenizer searches, stored so that loading uses them in place
// (formats/bpe_table.hpp). Written without the required flag: a reader that
// does not know it skips it and builds the tables from the tokenizer section.
inline constexpr uint32_t kSectionTokenizerTables = 4;
inline constexpr uint32_t kTablesGpt2Bpe = 1;           // table kind: GPT-2 byte-level BPE
inline constexpr uint64_t kTablesOffTokenCount = 8;     // u64, equal to the tokenizer section's
inline constexpr uint64_t kTablesOffCapacity = 16;      // u64, merge table slots: a power of two, 16 to 2^26
inline constexpr uint64_t kTablesOffByteIds = 24;       // i32[256]
inline constexpr uint64_t kTablesOffKeys = 24 + 1024;   // u64[capacity], then {i32 rank, i32 id}[capacity],
                                                        // u64[token_count + 1] byte offsets, the token bytes
inline constexpr uint64_t kMaxTableCapacity = uint64_t(1) << 26;
// Table kind 2, for a tokenizer.json BPE (tokenizer kind 3); required with it.
// The merge table and the vocabulary index are checked where they are read
// (bounded probes, ids checked), the rest at load:
//   u32 kind (2), u32 reserved, u64 token_count, u64 capacity, i32 byte_id[256],
//   u64 merge_count, u64 vocab_capacity (a power of two, 16 to 2^27),
//   u64 keys[capacity], {i32 rank, i32 id}[capacity],
//   u64 byte_offsets[token_count + 1], u64 key_offsets[token_count + 1],
//   i32 vocab_slots[vocab_capacity], the tokens' bytes, the tokens' keys.
inline constexpr uint32_t kTablesBpe = 2;
inline constexpr uint64_t kTables2OffMergeCount = 24 + 1024;
inline constexpr uint64_t kTables2OffVocabCapacity = 24 + 1024 + 8;
inline constexpr uint64_t kTables2OffKeys = 24 + 1024 + 16;
inline constexpr uint64_t kMaxVocabCapacity = uint64_t(1) << 27;

// --- tokenizer pipeline section (kind 6, required; tokenizer kind 3 only) ------
// A Hugging Face tokenizer's pipeline around its BPE model (text/hf_tokenizer.hpp):
// u32 version (1), u32 reserved (0), u64 byte count, then that many bytes of
// UTF-8 JSON.
inline constexpr uint32_t kSectionTokenizerPipeline = 6;
inline constexpr uint32_t kPipelineVersion = 1;
inline constexpr uint64_t kMaxPipelineBytes = uint64_t(64) << 20;

// --- tensor directory section ------------------------------------------------
inline constexpr uint32_t kMaxNameBytes = 256;
inline constexpr uint32_t kMaxDims = 8;
// Smallest possible entry: u32 name_len + 1 name byte + u32 dtype + u32 layout + u32 ndim + u64 offset + u64 nbytes.
inline constexpr uint64_t kMinTensorEntrySize = 4 + 1 + 4 + 4 + 4 + 8 + 8;

// --- tensor data ----------------------------------------------------------------
inline constexpr uint64_t kDataAlignment = 64;           // every tensor: widest vector load, cache line
inline constexpr uint64_t kPageAlignment = 4096;         // large tensors: mmap hands them out page-aligned
inline constexpr uint64_t kLargeTensorBytes = 1u << 20;  // "large" = at least 1 MiB

inline uint64_t required_alignment(uint64_t nbytes) {
  return nbytes >= kLargeTensorBytes ? kPageAlignment : kDataAlignment;
}

}  // namespace mmgpt::mmgpt_file
