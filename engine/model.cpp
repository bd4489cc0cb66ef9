#include "engine/model.hpp"

namespace mmgpt {

std::shared_ptr<const Model> Model::load(const std::string& path) {
  return std::shared_ptr<const Model>(new Model(ModelFile::open(path)));
}

}  // namespace mmgpt
