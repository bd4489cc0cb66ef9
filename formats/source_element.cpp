#include "formats/source_element.hpp"

#include <cstring>

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

uint64_t source_element_size(SourceElement element) {
  for (const SourceElementInfo& e : kElements)
    if (e.element == element) return e.size;
  return 0;
}

namespace {

template <typename F>
void widen_each(const uint8_t* src, uint64_t numel, uint64_t size, float* dst, F convert) {
  for (uint64_t i = 0; i < numel; ++i) dst[i] = convert(src + size * i);
}

}  // namespace

void widen_to_f32(const uint8_t* src, uint64_t numel, SourceElement element, float* dst) {
  switch (element) {
    case SourceElement::F32: std::memcpy(dst, src, numel * sizeof(float)); break;
    case SourceElement::F16:
      widen_each(src, numel, 2, dst, [](const uint8_t* p) { return f16_to_f32(load_le<uint16_t>(p)); });
      break;
    case SourceElement::BF16:
      widen_each(src, numel, 2, dst, [](const uint8_t* p) { return bf16_to_f32(load_le<uint16_t>(p)); });
      break;
    case SourceElement::F64:
      widen_each(src, numel, 8, dst, [](const uint8_t* p) { return static_cast<float>(load_le<double>(p)); });
      break;
    case SourceElement::I64:
      widen_each(src, numel, 8, dst, [](const uint8_t* p) { return static_cast<float>(load_le<int64_t>(p)); });
      break;
    case SourceElement::I32:
      widen_each(src, numel, 4, dst, [](const uint8_t* p) { return static_cast<float>(load_le<int32_t>(p)); });
      break;
    case SourceElement::I16:
      widen_each(src, numel, 2, dst, [](const uint8_t* p) { return static_cast<float>(load_le<int16_t>(p)); });
      break;
    case SourceElement::I8:
      widen_each(src, numel, 1, dst, [](const uint8_t* p) { return static_cast<float>(static_cast<int8_t>(*p)); });
      break;
    case SourceElement::U8: widen_each(src, numel, 1, dst, [](const uint8_t* p) { return static_cast<float>(*p); }); break;
    case SourceElement::Bool: widen_each(src, numel, 1, dst, [](const uint8_t* p) { return *p ? 1.0f : 0.0f; }); break;
  }
}

}  // namespace mmgpt
