#pragma once
// Reading PyTorch files without Python and without executing pickle code.
#include <string>
#include <utility>
#include <vector>

#include "formats/host_tensor.hpp"
#include "formats/pickle_value.hpp"

namespace mmgpt {

// A torch.save file: the zip format (torch >= 1.6; entries `<top>/data.pkl`,
// `<top>/data/<key>`) or the legacy pre-1.6 format (magic number, protocol,
// sys info, pickle, storage keys, raw storages). Tensors come back as
// pickle::Value::Kind::Tensor leaves read on demand from the mapped file as
// row-major f32 (f16, bf16, ... widened; views with storage offsets and
// strides honoured; storages shared between tensors handled). Throws
// mmgpt::Error naming the file.
pickle::ValuePtr load_torch_file(const std::string& path);

// A plain pickle file (e.g. nanoGPT's meta.pkl), with the same restrictions.
pickle::ValuePtr load_pickle_file(const std::string& path);

// A .safetensors file: tensors in header order, read on demand from the
// mapped file as f32 (F16, BF16, ... widened).
std::vector<std::pair<std::string, HostTensor>> load_safetensors(const std::string& path);

}  // namespace mmgpt
