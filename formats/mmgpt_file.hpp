#pragma once
// The .mmgpt weight file: writer and memory-mapped, validating reader.
// The byte-level specification is docs/format.md; this header is its C++ face.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/bpe_table.hpp"
#include "formats/model_config.hpp"

namespace mmgpt {

inline constexpr uint32_t kFormatVersion = 1;

// One tensor inside a mapped file. `data` points into the read-only mapping:
// weights are never copied.
struct TensorView {
  std::string name;
  WeightType dtype = WeightType::F32;
  Layout layout = Layout::RowMajor;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;  // from the start of the file
  uint64_t nbytes = 0;
  const void* data = nullptr;

  const float* f32() const { return static_cast<const float*>(data); }
  const uint16_t* u16() const { return static_cast<const uint16_t*>(data); }  // bf16 / f16 elements
  uint64_t numel() const {
    uint64_t n = 1;
    for (uint64_t s : shape) n *= s;
    return n;
  }
};

// The tokenizer section (kind 2) as the file stores it, validated, its
// strings pointing into the mapping.
struct StoredTokenizer {
  TokenizerKind kind = TokenizerKind::None;
  int64_t eos_id = -1;
  std::vector<std::string_view> tokens;
  std::vector<std::pair<std::string_view, std::string_view>> merges;
  std::string_view pipeline;  // kind Bpe: the pipeline section's JSON text

  TokenizerData data() const;  // the same, as owned strings
};

// A BPE tokenizer's tables as the file stores them (section kind 4),
// validated, pointing into the mapping. Table kind 1 (GPT-2 BPE) is checked
// whole at load; kind 2 (a tokenizer.json's) has its offsets checked at load
// and its merge table and vocabulary index where they are read.
struct StoredBpeTables {
  uint32_t table_kind = 1;
  BpeTableView table;
  const uint64_t* byte_offsets = nullptr;  // [token_count + 1]: token i is bytes[byte_offsets[i], byte_offsets[i + 1])
  const char* bytes = nullptr;
  uint64_t token_count = 0;
  std::string_view token_bytes(uint64_t id) const {
    return {bytes + byte_offsets[id], static_cast<size_t>(byte_offsets[id + 1] - byte_offsets[id])};
  }
  // Kind 2 only: the merge rules' count, each token's key in the model's
  // space (raw bytes for byte-level BPE, the spelling otherwise; empty for an
  // added token outside the model) and the keys' index: open addressing
  // over ids by formats/string_index.hpp's hash, -1 in an empty slot.
  uint64_t merge_count = 0;
  const uint64_t* key_offsets = nullptr;
  const char* keys = nullptr;
  std::span<const int32_t> vocab_slots;
  std::string_view token_key(uint64_t id) const {
    return {keys + key_offsets[id], static_cast<size_t>(key_offsets[id + 1] - key_offsets[id])};
  }
};

class ModelFile {
 public:
  // Maps `path` read-only and validates every field before any pointer is
  // formed. Throws mmgpt::Error naming the file, the field and the bad value.
  static ModelFile open(const std::string& path);

  ModelFile(ModelFile&&) noexcept;
  ModelFile& operator=(ModelFile&&) noexcept;
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;
  ~ModelFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  const ModelConfig& config() const { return config_; }
  // The tokenizer section as owned strings: built on the first call (the
  // section is validated at open), so a load that runs on the stored tables
  // never builds it. Safe to call from several threads.
  const TokenizerData& tokenizer() const;
  // The same section in place: kind, eos id and the strings, without copying.
  const StoredTokenizer& stored_tokenizer() const { return stored_tokenizer_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // The stored tokenizer tables, or nullptr when the file has none (then the
  // tokenizer builds them from tokenizer()).
  const StoredBpeTables* bpe_tables() const { return bpe_tables_ ? &*bpe_tables_ : nullptr; }
  const TensorView* find(std::string_view name) const;  // nullptr if absent
  // Bytes of the mapping currently in memory (page cache), from mincore(2):
  // how much of the model a process has touched, or shares with others.
  // Empty where the system cannot say.
  std::optional<uint64_t> resident_bytes() const;
  // The whole mapped file (page-aligned base), e.g. to measure how fast its pages can be read.
  const unsigned char* mapped_bytes() const { return static_cast<const unsigned char*>(map_); }
  const TensorView& tensor(std::string_view name) const;  // throws mmgpt::Error if absent
  // Where open()'s wall time went: opening and mapping the file, then
  // validating it (parsing every section); 0 for an image not from open().
  double map_seconds() const { return map_seconds_; }
  double validate_seconds() const { return validate_seconds_; }

 private:
  ModelFile() = default;
  friend ModelFile parse_model_file_for_test(const void* bytes, uint64_t size, const std::string& path);
  std::string path_;
  uint32_t version_ = 0;
  const void* map_ = nullptr;  // mmap base (or borrowed bytes in tests)
  uint64_t size_ = 0;
  bool owns_map_ = false;
  ModelConfig config_;
  StoredTokenizer stored_tokenizer_;
  struct LazyTokenizer {
    std::once_flag once;
    TokenizerData data;
  };
  std::unique_ptr<LazyTokenizer> tokenizer_ = std::make_unique<LazyTokenizer>();
  std::vector<TensorView> tensors_;
  std::optional<StoredBpeTables> bpe_tables_;
  double map_seconds_ = 0, validate_seconds_ = 0;
};

// Validates an in-memory image exactly as open() validates a file (the bytes
// must outlive the result). For tests and fuzzing.
ModelFile parse_model_file_for_test(const void* bytes, uint64_t size, const std::string& path);

struct TensorToWrite {
  std::string name;
  WeightType dtype = WeightType::F32;
  Layout layout = Layout::RowMajor;
  std::vector<uint64_t> shape;
  const void* data = nullptr;  // nbytes bytes, laid out as `layout` says
  uint64_t nbytes = 0;
  // Instead of `data`: writes the nbytes bytes, in order and in pieces of any
  // size, by calling `put` (so a converter never holds the whole tensor).
  using Put = std::function<void(const void* bytes, uint64_t n)>;
  std::function<void(const Put& put)> produce;
};

// Writes a complete .mmgpt file. It is written to a temporary file beside
// `path` and renamed into place only once complete and flushed; on any failure
// the temporary is removed and an existing file at `path` is left untouched.
// Refuses (mmgpt::Error) inputs the reader would refuse: the file written is
// always one that open() accepts. An error a `produce` throws leaves no file too.
void write_model_file(const std::string& path, const ModelConfig& config, const TokenizerData& tokenizer,
                      const std::vector<TensorToWrite>& tensors);

}  // namespace mmgpt
