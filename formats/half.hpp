#pragma once
// Exact conversions of 16-bit floats to float32. Every f16 and bf16 value
// (subnormals, infinities, NaN payloads) is representable in f32, so these
// are bit-exact, not approximations.
#include <bit>
#include <cmath>
#include <cstdint>

namespace mmgpt {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);  // +-0
    // Subnormal: mantissa * 2^-24, exact in f32 (which has 8 exponent bits).
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31)  // inf or NaN, payload kept
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// bf16 is the top half of an f32.
inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

}  // namespace mmgpt
