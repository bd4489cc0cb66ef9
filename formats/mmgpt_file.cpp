// ModelFile: maps a .mmgpt file read-only and hands out views into the
// mapping. Parsing and validation live in mmgpt_file_parse.cpp; writing in
// mmgpt_file_writer.cpp.
#include "formats/mmgpt_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/platform.hpp"
#include "formats/error.hpp"
#include "formats/mmgpt_file_layout.hpp"
#include "formats/mmgpt_file_parse.hpp"

namespace mmgpt {
namespace {

// Closes the descriptor on every path out of open(); the mapping outlives it.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

ModelFile ModelFile::open(const std::string& path) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  // O_NONBLOCK: opening a FIFO by mistake must fail fast, not hang.
  FdGuard guard{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (guard.fd < 0) throw Error(path + ": cannot open model file (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(guard.fd, &st) != 0) throw Error(path + ": cannot stat model file (" + std::strerror(errno) + ")");
  if (S_ISDIR(st.st_mode)) throw Error(path + ": is a directory, not a .mmgpt file");
  if (!S_ISREG(st.st_mode)) throw Error(path + ": is not a regular file");
  if (st.st_size == 0) throw Error(path + ": file is empty (0 bytes), not a .mmgpt file");
  const auto size = static_cast<uint64_t>(st.st_size);
  if constexpr (sizeof(size_t) < sizeof(uint64_t)) {
    if (size > SIZE_MAX) throw Error(path + ": file of " + std::to_string(size) + " bytes is too large to map");
  }

  void* map = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, guard.fd, 0);
  if (map == MAP_FAILED) throw Error(path + ": cannot map model file (" + std::strerror(errno) + ")");
  // Pages of the file read in from now on come in 2 MiB folios, which the
  // mapping takes as 2 MB pages: decode streams every weight once a token and
  // on 4 KB pages pays a TLB miss every 4 KB (docs/kernels.md, "2 MB pages
  // for the weights"). Pages already cached keep their size. Advisory: a
  // kernel without transparent huge pages for files maps 4 KB pages.
  platform::advise_huge_pages(map, static_cast<size_t>(size));
  ModelFile file;  // owns the mapping from here on: its destructor unmaps on a parse error
  file.map_ = map;
  file.size_ = size;
  file.owns_map_ = true;
  file.path_ = path;
  const Clock::time_point mapped = Clock::now();
  mmgpt_file::ParsedImage parsed = mmgpt_file::parse_image(static_cast<const unsigned char*>(map), size, path);
  file.version_ = parsed.version;
  file.config_ = parsed.config;
  file.stored_tokenizer_ = std::move(parsed.tokenizer);
  file.tensors_ = std::move(parsed.tensors);
  file.bpe_tables_ = parsed.bpe_tables;
  file.map_seconds_ = std::chrono::duration<double>(mapped - start).count();
  file.validate_seconds_ = std::chrono::duration<double>(Clock::now() - mapped).count();
  return file;
}

ModelFile parse_model_file_for_test(const void* bytes, uint64_t size, const std::string& path) {
  mmgpt_file::ParsedImage parsed = mmgpt_file::parse_image(static_cast<const unsigned char*>(bytes), size, path);
  ModelFile file;
  file.path_ = path;
  file.map_ = bytes;
  file.size_ = size;
  file.owns_map_ = false;
  file.version_ = parsed.version;
  file.config_ = parsed.config;
  file.stored_tokenizer_ = std::move(parsed.tokenizer);
  file.tensors_ = std::move(parsed.tensors);
  file.bpe_tables_ = parsed.bpe_tables;
  return file;
}

ModelFile::ModelFile(ModelFile&& other) noexcept
    : path_(std::move(other.path_)),
      version_(other.version_),
      map_(std::exchange(other.map_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owns_map_(std::exchange(other.owns_map_, false)),
      config_(other.config_),
      stored_tokenizer_(std::move(other.stored_tokenizer_)),
      tokenizer_(std::move(other.tokenizer_)),
      tensors_(std::move(other.tensors_)),
      bpe_tables_(other.bpe_tables_),
      map_seconds_(other.map_seconds_),
      validate_seconds_(other.validate_seconds_) {}

ModelFile& ModelFile::operator=(ModelFile&& other) noexcept {
  if (this != &other) {
    if (owns_map_ && map_) ::munmap(const_cast<void*>(map_), static_cast<size_t>(size_));
    path_ = std::move(other.path_);
    version_ = other.version_;
    map_ = std::exchange(other.map_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owns_map_ = std::exchange(other.owns_map_, false);
    config_ = other.config_;
    stored_tokenizer_ = std::move(other.stored_tokenizer_);
    tokenizer_ = std::move(other.tokenizer_);
    tensors_ = std::move(other.tensors_);
    bpe_tables_ = other.bpe_tables_;
    map_seconds_ = other.map_seconds_;
    validate_seconds_ = other.validate_seconds_;
  }
  return *this;
}

ModelFile::~ModelFile() {
  if (owns_map_ && map_) ::munmap(const_cast<void*>(map_), static_cast<size_t>(size_));
}

TokenizerData StoredTokenizer::data() const {
  TokenizerData d;
  d.kind = kind;
  d.eos_id = eos_id;
  d.tokens.assign(tokens.begin(), tokens.end());
  d.pipeline.assign(pipeline);
  d.merges.reserve(merges.size());
  for (const auto& [a, b] : merges) d.merges.emplace_back(a, b);
  return d;
}

const TokenizerData& ModelFile::tokenizer() const {
  std::call_once(tokenizer_->once, [this] {
    TokenizerData d = stored_tokenizer_.data();
    if (bpe_tables_ && bpe_tables_->table_kind == mmgpt_file::kTablesBpe) {
      // A tokenizer.json BPE keeps its merges, keys and bytes in its tables.
      const StoredBpeTables& t = *bpe_tables_;
      const uint64_t n = t.token_count;
      std::vector<std::pair<int32_t, uint64_t>> ranked;  // (rank, slot)
      for (uint64_t h = 0; h < t.table.keys.size(); ++h)
        if (t.table.keys[h] != kBpeEmptyKey) ranked.emplace_back(t.table.merges[h].rank, h);
      std::sort(ranked.begin(), ranked.end());
      for (const auto& [rank, h] : ranked) {
        const uint64_t a = t.table.keys[h] >> 32, b = t.table.keys[h] & 0xFFFFFFFFu;
        if (a >= n || b >= n) throw Error(path_ + ": tokenizer tables section: merge table slot " +
                                          std::to_string(h) + " names an id past the tokenizer");
        d.merges.emplace_back(d.tokens[a], d.tokens[b]);
        d.merge_ranks.push_back(rank);
      }
      for (uint64_t i = 0; i < n; ++i) {
        d.keys.emplace_back(t.token_key(i));
        d.bytes.emplace_back(t.token_bytes(i));
      }
      std::copy_n(t.table.byte_id, 256, d.byte_ids.begin());
    }
    tokenizer_->data = std::move(d);
  });
  return tokenizer_->data;
}

const TensorView* ModelFile::find(std::string_view name) const {
  for (const TensorView& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorView& ModelFile::tensor(std::string_view name) const {
  if (const TensorView* t = find(name)) return *t;
  throw Error(path_ + ": no tensor named '" + std::string(name) + "'");
}

std::optional<uint64_t> ModelFile::resident_bytes() const {
  if (!map_ || size_ == 0) return uint64_t{0};
  if (!owns_map_) return size_;  // an in-memory image is resident by definition
  return platform::resident_bytes(map_, static_cast<size_t>(size_));
}

}  // namespace mmgpt
