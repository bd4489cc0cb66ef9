#pragma once
// A loaded model: the mapped, validated .mmgpt file plus typed pointers to its
// weights. Weights are read in place from the mapping (never copied), so one
// Model can serve any number of sessions and processes share its pages.
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

  // Named weight lookup; throws if absent (the reader guarantees required ones exist).
  const float* weight(const std::string& name) const { return file_.tensor(name).f32(); }

 private:
  explicit Model(ModelFile file) : file_(std::move(file)) {}
  ModelFile file_;
};

}  // namespace mmgpt
