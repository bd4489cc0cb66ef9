#include "formats/source_element.hpp"

#include "core/half.hpp"

namespace mmgpt {
namespace {

constexpr SourceElementInfo kElements[] = {
    {SourceElement::F32, 4, "float32", "F32"},    {SourceElement::F16, 2, "float16", "F16"},
    {SourceElement::BF16, 2, "bfloat16", "BF16"}, {SourceElement::F64, 8, "float64", "F64"},
    {SourceElement::I64, 8, "int64", "I64"},      {SourceElement::I32, 4, "int32", "I32"},
    {SourceElement::I16, 2, "int16", "I16"},      {SourceElement::I8, 1, "int8", "I8"},
    {SourceElement::U8, 1, "uint8", "U8"},        {SourceElement::Bool, 1, "bool", "BOOL"},
};

}  // namespace

const SourceElementInfo* source_element_by_torch_name(std::string_view name) {
  for (const SourceElementInfo& e : kElements)
    if (e.torch == name) return &e;
  return nullptr;
}

const SourceElementInfo* source_element_by_safetensors_name(std::string_view name) {
  for (const SourceElementInfo& e : kElements)
    if (e.safetensors == name) return &e;
  return nullptr;
}

void widen_to_f32(const uint8_t* src, uint64_t numel, SourceElement element, float* dst) {
  for (uint64_t i = 0; i < numel; ++i) {
    switch (element) {
      case SourceElement::F32: dst[i] = load_le<float>(src + 4 * i); break;
      case SourceElement::F16: dst[i] = f16_to_f32(load_le<uint16_t>(src + 2 * i)); break;
      case SourceElement::BF16: dst[i] = bf16_to_f32(load_le<uint16_t>(src + 2 * i)); break;
      case SourceElement::F64: dst[i] = static_cast<float>(load_le<double>(src + 8 * i)); break;
      case SourceElement::I64: dst[i] = static_cast<float>(load_le<int64_t>(src + 8 * i)); break;
      case SourceElement::I32: dst[i] = static_cast<float>(load_le<int32_t>(src + 4 * i)); break;
      case SourceElement::I16: dst[i] = static_cast<float>(load_le<int16_t>(src + 2 * i)); break;
      case SourceElement::I8: dst[i] = static_cast<float>(static_cast<int8_t>(src[i])); break;
      case SourceElement::U8: dst[i] = static_cast<float>(src[i]); break;
      case SourceElement::Bool: dst[i] = src[i] ? 1.0f : 0.0f; break;
    }
  }
}

}  // namespace mmgpt
