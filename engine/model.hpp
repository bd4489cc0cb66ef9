#pragma once
// A loaded model: the mapped, validated .mmgpt file plus typed pointers to its
// weights. Weights are read in place from the mapping (never copied), so one
// Model can serve any number of sessions and processes share its pages.
// The one exception: weight matrices a file stores row-major (written by
// `mmgpt convert --weight-layout row-major` of earlier versions) are packed
// into panels at load, into memory of the Model's own, since the kernels read
// only panels; notices() says so.
#include <memory>
#include <string>
#include <vector>

#include "formats/mmgpt_file.hpp"

namespace mmgpt {

class Model {
 public:
  // Maps and validates the file (see ModelFile::open); throws mmgpt::Error.
  static std::shared_ptr<const Model> load(const std::string& path);

  const ModelFile& file() const { return file_; }
  const ModelConfig& config() const { return file_.config(); }
  const TokenizerData& tokenizer_data() const { return file_.tokenizer(); }

  // A tensor as the engine reads it: the file's, or its packed copy for a
  // matrix the file stores row-major. Throws if absent.
  const TensorView& tensor(const std::string& name) const;
  // Named f32 tensor (norms, biases, position tables); throws if absent.
  const float* weight(const std::string& name) const { return file_.tensor(name).f32(); }

  // What loading did that the user should know about, a sentence each.
  const std::vector<std::string>& notices() const { return notices_; }

 private:
  explicit Model(ModelFile file);
  ModelFile file_;
  struct alignas(64) Line {
    float f[16];
  };
  std::vector<std::vector<Line>> packed_storage_;
  std::vector<TensorView> packed_;  // views of packed_storage_, by name
  std::vector<std::string> notices_;
};

}  // namespace mmgpt
