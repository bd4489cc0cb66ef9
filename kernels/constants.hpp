#pragma once
// Constants shared by the scalar reference and the SIMD kernels, so both round
// them the same way. Values match PyTorch's (M_SQRT1_2, and
// M_SQRT2 * M_2_SQRTPI * 0.5 for the tanh approximation), rounded to float.
namespace mmgpt::kernels::detail {

inline constexpr float kInvSqrt2 = 0.70710678118654752440f;     // 1/sqrt(2), gelu_erf
inline constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2/pi), gelu_tanh
inline constexpr float kGeluKappa = 0.044715f;                  // gelu_tanh cubic term

}  // namespace mmgpt::kernels::detail
