#pragma once
// Conversions between float32 and the 16-bit floats. Every f16 and bf16 value
// (subnormals, infinities, NaN payloads) is representable in f32, so the
// widening ones are bit-exact, not approximations. The narrowing ones round to
// nearest, ties to even (the IEEE default), overflow to infinity, and keep
// NaNs NaN (quiet, with the top payload bits).
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

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x0040u);  // NaN: quiet, sign kept
  // Adding 0x7fff plus the lowest kept bit rounds to nearest even; a carry
  // out of the mantissa bumps the exponent (up to infinity), as it should.
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // NaN: quiet
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 (the tie above 65504) and inf: inf
  if (ax < 0x38800000u) {
    // Below 2^-14: an f16 subnormal (or zero / the smallest normal after
    // rounding), a multiple of 2^-24. Scaling by 2^24 is exact; nearbyint
    // rounds half to even in the default rounding mode.
    const float scaled = std::bit_cast<float>(ax) * 0x1p24f;
    return uint16_t(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  // Normal: rebias the exponent from 127 to 15 and round the 13 dropped
  // mantissa bits to nearest even (a carry moves into the exponent).
  const uint32_t rebased = ax - (112u << 23);
  return uint16_t(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
}

}  // namespace mmgpt
