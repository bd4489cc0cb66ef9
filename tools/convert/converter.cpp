#include "tools/convert/converter.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include <tbb/blocked_range.h>
#include <tbb/partitioner.h>

#include "core/platform.hpp"
#include "core/weight_type.hpp"
#include "formats/error.hpp"
#include "formats/file_util.hpp"
#include "formats/mmgpt_file.hpp"
#include "formats/mmgpt_file_rules.hpp"
#include "text/tokenizer_files.hpp"
#include "kernels/parallel.hpp"
#include "tools/convert/checkpoint_loader.hpp"
#include "tools/convert/layout.hpp"
#include "tools/convert/tensor_ops.hpp"

namespace mmgpt {

using namespace convert;

namespace {
std::string& data_dir_override() {
  static std::string dir;
  return dir;
}
}  // namespace

void set_bundled_data_dir(std::string dir) { data_dir_override() = std::move(dir); }

std::string bundled_data_dir() {
  // An installed mmgpt has its data in PREFIX/share/mmgpt, beside PREFIX/bin;
  // a build tree's is the source tree's data/ (MMGPT_DATA_DIR).
  const auto has_data = [](const std::filesystem::path& dir) {
    std::error_code ec;
    return std::filesystem::is_regular_file(dir / "gpt2" / "encoder.json", ec);
  };
  if (!data_dir_override().empty() && has_data(data_dir_override())) return data_dir_override();
  const std::filesystem::path exe = platform::executable_path();
  if (!exe.empty() && has_data(exe.parent_path().parent_path() / "share" / "mmgpt"))
    return (exe.parent_path().parent_path() / "share" / "mmgpt").string();
#ifdef MMGPT_DATA_DIR
  if (has_data(MMGPT_DATA_DIR)) return MMGPT_DATA_DIR;
#endif
  return "";
}

namespace {

constexpr uint32_t kGpt2Vocab = 50257;

WeightType parse_dtype(const std::string& name, const char* option) {
  if (const WeightTypeInfo* t = weight_type_by_name(name)) return t->type;
  throw Error(std::string(option) + " '" + name + "' is not one of " + weight_type_names());
}

std::string dtype_label(WeightType d) { return std::string(weight_type_name(d)); }

// A block scale is stored as f16: a block whose largest magnitude needs a
// scale beyond f16's range (or holds inf / NaN) cannot be quantized
// faithfully, so it is an error rather than silently zeroed. `first` is the
// index of values[0] in the tensor.
void check_storable(const float* values, uint64_t n, uint64_t first, const std::string& name, WeightType dt) {
  const float limit = weight_type_info(dt).max_magnitude;
  if (limit == std::numeric_limits<float>::infinity()) return;
  for (uint64_t i = 0; i < n; ++i)
    if (!(std::fabs(values[i]) <= limit))
      throw Error("tensor '" + name + "': value " + std::to_string(values[i]) + " at element " +
                  std::to_string(first + i) + " cannot be stored as " + dtype_label(dt) +
                  " (its block scale would exceed f16's range)");
}

// Row-major f32, a piece of rows at a time.
void stream_rows(const HostTensor& t, const TensorToWrite::Put& put) {
  const uint64_t row = std::max<uint64_t>(1, t.row_size());
  const uint64_t piece = std::max<uint64_t>(1, kPieceBytes / sizeof(float) / row);
  Scratch<float> scratch(std::min(piece, t.rows()) * row);
  float* buf = scratch.get();
  for (uint64_t r = 0; r < t.rows() && t.numel() > 0; r += piece) {
    const uint64_t n = std::min(piece, t.rows() - r);
    t.read_rows(r, n, buf);
    put(buf, n * row * sizeof(float));
  }
}

// W[N, K] packed for `dt`, a piece of whole packing units at a time
// (pack_row_unit: the pieces' bytes, one after another, are the whole's).
void stream_packed(const HostTensor& t, uint64_t N, uint64_t K, WeightType dt, const std::string& name,
                   const TensorToWrite::Put& put) {
  const WeightTypeInfo& info = weight_type_info(dt);
  const uint64_t unit = pack_row_unit(dt);
  const uint64_t piece = std::max<uint64_t>(1, kPieceBytes / sizeof(float) / K / unit) * unit;
  const uint64_t most = std::min(piece, N);
  Scratch<float> rows(most * K);
  Scratch<uint8_t> packing(packed_weight_bytes(dt, most, K));
  float* buf = rows.get();
  uint8_t* packed = packing.get();
  for (uint64_t r = 0; r < N; r += piece) {
    const uint64_t n = std::min(piece, N - r);
    t.read_rows(r, n, buf);
    check_storable(buf, n * K, r * K, name, dt);
    // Units pack independently: groups of them on every core.
    const uint64_t group = 4 * unit;
    mmgpt::parallel_for(
        tbb::blocked_range<uint64_t>(0, (n + group - 1) / group, 1),
        [&](const tbb::blocked_range<uint64_t>& g) {
          const uint64_t r0 = g.begin() * group, r1 = std::min(n, g.end() * group);
          info.pack(buf + r0 * K, r1 - r0, K, packed + packed_weight_bytes(dt, r0, K));
        },
        tbb::simple_partitioner());
    put(packed, packed_weight_bytes(dt, n, K));
  }
}

// The tokenizer: --tokenizer, else files in the checkpoint's directory (none
// for one in memory), else (nanochat) its base directory's tokenizer.pkl, else
// (nanoGPT trained on GPT-2 BPE, the default) the bundled GPT-2 files, else none.
std::optional<FoundTokenizer> choose_tokenizer(const ConvertOptions& opt, const std::string& directory,
                                               LayoutKind layout, const ModelConfig& config,
                                               std::vector<std::string>& notes) {
  if (!opt.tokenizer.empty()) return load_tokenizer_path(opt.tokenizer);
  if (!directory.empty())
    if (std::optional<FoundTokenizer> beside = find_tokenizer_in(directory)) return beside;
  if (layout == LayoutKind::Nanochat && !directory.empty()) {
    // nanochat keeps its tokenizer in its base directory, two levels above a
    // checkpoint directory (base_checkpoints/<tag>/): tokenizer/tokenizer.pkl.
    std::filesystem::path base = std::filesystem::absolute(directory).lexically_normal();
    if (base.filename().empty()) base = base.parent_path();
    const std::string dir = (base.parent_path().parent_path() / "tokenizer").string();
    if (is_file(join_path(dir, "tokenizer.pkl"))) {
      notes.push_back("the tokenizer of nanochat's base directory: " + dir);
      return load_tokenizer_path(join_path(dir, "tokenizer.pkl"));
    }
  }
  if (layout == LayoutKind::NanoGpt && config.vocab_size >= kGpt2Vocab) {
    const std::string dir = bundled_data_dir();
    if (!dir.empty()) {
      const std::string encoder = join_path(dir, "gpt2/encoder.json"), bpe = join_path(dir, "gpt2/vocab.bpe");
      notes.push_back(
          "no tokenizer files beside the checkpoint: using the bundled GPT-2 BPE tokenizer (nanoGPT's "
          "default for a vocabulary of " +
          std::to_string(config.vocab_size) + ")");
      return FoundTokenizer{read_bpe_files(encoder, bpe), encoder + " + " + bpe};
    }
    notes.push_back(
        "the bundled GPT-2 tokenizer is missing (neither PREFIX/share/mmgpt/gpt2 beside the binary nor the source "
        "tree's data/gpt2 holds it)");
  }
  notes.push_back("no tokenizer found: the model runs on token ids (--ids)");
  return std::nullopt;
}

// A checkpoint's contents, read from a file or handed over in memory.
struct Source {
  std::string name;       // the file, or what messages call the in-memory checkpoint
  std::string directory;  // where config.json and tokenizer files may sit; "" in memory
  std::string container;  // for the summary
  const StateDict* weights = nullptr;
  const pickle::Value* root = nullptr;  // the top-level object (nanoGPT's model_args), or null
};

// The checks that need no input; returns the layout --layout forces, if any.
std::optional<LayoutKind> check_options(const ConvertOptions& opt) {
  if (opt.output.empty()) throw Error("convert: no output file given (-o OUT.mmgpt)");
  if (opt.n_head < 0) throw Error("--n-head " + std::to_string(opt.n_head) + " is not a positive number");
  if (opt.weight_layout == "row-major")
    throw Error(
        "--weight-layout row-major is no longer written: the kernels read only panel16 (files written with "
        "it still load, packed into panels at load)");
  if (opt.weight_layout != "panel16")
    throw Error("--weight-layout '" + opt.weight_layout + "' is not panel16, the one layout written");
  if (opt.layout == "auto") return std::nullopt;
  return parse_layout_name(opt.layout);
}

ConvertSummary convert_source(const Source& src, std::optional<LayoutKind> forced, const ConvertOptions& opt) {
  const std::string& file = src.name;
  ConvertSummary summary;
  const LayoutKind kind = forced ? *forced : detect_layout(*src.weights, file);

  LayoutInput in;
  in.file = file;
  in.weights = src.weights;
  in.root = src.root;
  in.directory = src.directory;
  in.config_text = opt.config_json;
  in.n_head = uint32_t(opt.n_head);
  MappedModel model = map_layout(kind, in);
  validate_config(model.config, file);

  // Belt and braces: the mapper's output must be exactly what the file format requires.
  const WeightType dtype = parse_dtype(opt.dtype, "--dtype");
  const WeightType dtype_head = opt.dtype_head.empty() ? dtype : parse_dtype(opt.dtype_head, "--dtype-head");
  const std::string head_name = model.config.tied_lm_head ? "wte" : "lm_head.weight";
  std::map<std::string, TensorPtr*> by_name;
  for (auto& [name, t] : model.tensors)
    if (!by_name.emplace(name, &t).second) throw Error("internal: layout produced '" + name + "' twice");
  std::vector<TensorToWrite> to_write;
  uint64_t bytes = 0;
  std::set<std::string> dtypes;
  for (const TensorSpec& spec : required_tensors(model.config)) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end())
      throw Error("internal: layout " + std::string(layout_name(kind)) + " did not produce " + spec.name);
    const TensorPtr t = *it->second;
    if (t->shape != spec.shape || !t->readable())
      throw Error("internal: " + spec.name + " has shape " + shape_str(t->shape) + ", the format wants " +
                  shape_str(spec.shape));
    if (!t->source_dtype.empty() && t->source_dtype != "float32") dtypes.insert(t->source_dtype);
    TensorToWrite w;
    w.name = spec.name;
    w.shape = spec.shape;
    // Read from the checkpoint only as the file is written, a piece at a time.
    if (spec.matrix) {
      // Packed (rounded, quantized) straight from the row-major matrix.
      const uint64_t n = spec.shape[0], k = spec.shape[1];
      w.layout = Layout::Panel16;
      w.dtype = spec.name == head_name ? dtype_head : dtype;
      w.nbytes = packed_weight_bytes(w.dtype, n, k);
      w.produce = [t, n, k, dt = w.dtype, name = spec.name](const TensorToWrite::Put& put) {
        stream_packed(*t, n, k, dt, name, put);
      };
    } else {
      w.nbytes = t->numel() * sizeof(float);
      w.produce = [t](const TensorToWrite::Put& put) { stream_rows(*t, put); };
    }
    bytes += w.nbytes;
    to_write.push_back(std::move(w));
    by_name.erase(it);
  }
  if (!by_name.empty()) throw Error("internal: layout produced an unexpected tensor " + by_name.begin()->first);

  summary.notes = std::move(model.notes);
  if (dtype != WeightType::F32 || dtype_head != WeightType::F32)
    summary.notes.push_back(std::string("weight matrices stored as ") + dtype_label(dtype) + ", the LM head (" +
                            head_name + ") as " + dtype_label(dtype_head) +
                            (is_quantized(dtype) || is_quantized(dtype_head)
                                 ? " (q8_0 / q4_0: blocks of 32 with an f16 scale; bf16 / f16: rounded to nearest even)"
                                 : " (rounded to nearest even)") +
                            "; norms, biases and wpe stay f32");
  for (const std::string& dt : dtypes)
    summary.notes.push_back("weights stored as " + dt + " in the checkpoint were widened to float32");

  std::optional<FoundTokenizer> tok = choose_tokenizer(opt, src.directory, kind, model.config, summary.notes);
  TokenizerData tokenizer;
  if (tok) {
    if (tok->data.tokens.size() > model.config.vocab_size)
      throw Error(tok->source + ": the tokenizer has " + std::to_string(tok->data.tokens.size()) +
                  " tokens but the model's vocabulary has only " + std::to_string(model.config.vocab_size) + " rows");
    // The tokenizer's files were read too: never replace one of them with the model (-o ck/meta.pkl).
    for (size_t at = 0; at <= tok->source.size();) {
      const size_t plus = tok->source.find(" + ", at);
      const std::string part = tok->source.substr(at, plus == std::string::npos ? std::string::npos : plus - at);
      std::error_code ec;
      if (is_file(opt.output) && std::filesystem::equivalent(part, opt.output, ec))
        throw Error(opt.output + ": the output would overwrite the tokenizer file it was read from");
      if (plus == std::string::npos) break;
      at = plus + 3;
    }
    tokenizer = std::move(tok->data);
    summary.tokenizer_source = tok->source;
  }

  write_model_file(opt.output, model.config, tokenizer, to_write);

  summary.layout = layout_name(kind);
  summary.checkpoint = file;
  summary.container = src.container;
  summary.config = model.config;
  summary.tokenizer_kind = tokenizer.kind;
  summary.tokenizer_size = tokenizer.tokens.size();
  summary.tensors = to_write.size();
  summary.bytes = bytes;
  return summary;
}

}  // namespace

ConvertSummary convert_checkpoint(const ConvertOptions& opt) {
  if (opt.input.empty()) throw Error("convert: no input checkpoint given");
  const std::optional<LayoutKind> forced = check_options(opt);
  const std::string file = find_checkpoint_file(opt.input);
  if (is_file(opt.output)) {
    std::error_code ec;
    if (std::filesystem::equivalent(file, opt.output, ec))
      throw Error(opt.output + ": the output would overwrite the input checkpoint");
  }
  const LoadedCheckpoint ck = load_checkpoint(file);
  return convert_source(Source{file, parent_dir(file), container_name(ck.container), &ck.weights, ck.root.get()},
                        forced, opt);
}

ConvertSummary convert_in_memory(const pickle::Value& root, const std::string& name, const ConvertOptions& opt) {
  const std::optional<LayoutKind> forced = check_options(opt);
  std::string key;
  std::vector<std::string> skipped;
  StateDict weights = find_state_dict(root, name, &key, &skipped);
  strip_wrapper_prefixes(weights, name);
  return convert_source(Source{name, "", "in memory", &weights, &root}, forced, opt);
}

}  // namespace mmgpt
