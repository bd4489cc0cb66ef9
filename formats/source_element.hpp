#pragma once
// The element types PyTorch checkpoints store (torch.save storages and
// safetensors dtypes), and their one conversion to f32, shared by both
// readers. Integer and f64 tensors are converted too, so that a checkpoint
// carrying an integer buffer (an optimizer step, position ids) still loads.
#include <cstdint>
#include <cstring>
#include <string_view>

namespace mmgpt {

enum class SourceElement { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool };

struct SourceElementInfo {
  SourceElement element;
  uint64_t size;                 // bytes per element
  std::string_view torch;        // torch's name: HostTensor::source_dtype ("float32")
  std::string_view safetensors;  // the safetensors header's name ("F32")
};

// The element torch calls `name` ("float32", "bfloat16", ...), or null.
const SourceElementInfo* source_element_by_torch_name(std::string_view name);
// The element a safetensors header calls `name` ("F32", "BF16", ...), or null.
const SourceElementInfo* source_element_by_safetensors_name(std::string_view name);

// Bytes per element.
uint64_t source_element_size(SourceElement element);

// A little-endian T at p, which need not be aligned.
template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// numel little-endian elements at src (any alignment) to f32 at dst:
// 16-bit floats widened exactly, f64 and integers rounded to nearest.
void widen_to_f32(const uint8_t* src, uint64_t numel, SourceElement element, float* dst);

}  // namespace mmgpt
