#include "engine/model.hpp"

#include "core/weight_type.hpp"
#include "formats/error.hpp"

namespace mmgpt {

std::shared_ptr<const Model> Model::load(const std::string& path) {
  return std::shared_ptr<const Model>(new Model(ModelFile::open(path)));
}

Model::Model(ModelFile file) : file_(std::move(file)) {
  // Row-major matrices (always f32: the reader allows no other dtype there)
  // packed exactly as the converter packs them, so the file computes what its
  // panel16 twin computes, bit for bit.
  const WeightTypeInfo& f32 = weight_type_info(WeightType::F32);
  uint64_t bytes = 0;
  for (const TensorSpec& spec : required_tensors(config())) {
    const TensorView& t = file_.tensor(spec.name);
    if (!spec.matrix || t.layout != Layout::RowMajor) continue;
    const size_t n = static_cast<size_t>(spec.shape[0]), k = static_cast<size_t>(spec.shape[1]);
    const size_t nbytes = packed_weight_bytes(WeightType::F32, n, k);
    std::vector<Line>& storage = packed_storage_.emplace_back((nbytes + sizeof(Line) - 1) / sizeof(Line));
    f32.pack(t.f32(), n, k, storage.data());
    TensorView v = t;
    v.layout = Layout::Panel16;
    v.offset = 0;
    v.nbytes = nbytes;
    v.data = storage.data();
    packed_.push_back(std::move(v));
    bytes += nbytes;
  }
  if (!packed_.empty())
    notices_.push_back(file_.path() + ": its " + std::to_string(packed_.size()) +
                       " weight matrices are stored row-major (an older `convert --weight-layout row-major`); packed "
                       "at load into " +
                       std::to_string((bytes + (1 << 20) - 1) >> 20) +
                       " MB of this process's memory. Convert it again to map it without a copy.");
}

const TensorView& Model::tensor(const std::string& name) const {
  for (const TensorView& v : packed_)
    if (v.name == name) return v;
  return file_.tensor(name);
}

}  // namespace mmgpt
