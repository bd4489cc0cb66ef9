#pragma once
// A tensor read from a source checkpoint (torch.save or safetensors), already
// converted to contiguous row-major float32. The converter works on these;
// the engine never sees them (it reads the mapped .mmgpt file).
#include <cstdint>
#include <string>
#include <vector>

namespace mmgpt {

struct HostTensor {
  std::vector<uint64_t> shape;  // PyTorch order, outermost first; empty for a scalar
  std::vector<float> data;      // numel() values, C order
  std::string source_dtype;     // dtype in the source file: "float32", "float16" or "bfloat16"

  uint64_t numel() const {
    uint64_t n = 1;
    for (uint64_t s : shape) n *= s;
    return n;
  }
};

}  // namespace mmgpt
