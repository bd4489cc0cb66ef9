#pragma once
// kernels/simd/quant_tile.hpp's matmul over operations written lane by lane in
// plain C++, each the instruction it stands for as the Intel SDM defines it:
//   Vnni16: VPDPBUSD on 16 lanes (x86/avx512/quant_vnni.cpp's Ops, with its
//           split high nibbles and its broadcasts from memory);
//   Madd8:  VPMADDUBSW / VPSIGNB / VPMADDWD on 8 lanes (x86/avx2/quant.cpp's).
// So the tiles and blockings of both x86 geometries (6 x 2 panels of one
// vector each; 3 x 1 panel of two vectors) are checked against the scalar
// reference on every host, also where the CPU runs neither instruction set.
// Included by test_kernels_quant.cpp only (internal linkage).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/half.hpp"
#include "kernels/registry.hpp"
#include "kernels/simd/quant_tile.hpp"

namespace mmgpt::kernels::detail {
namespace {
namespace emulated {

template <size_t L>
struct I32 {
  int32_t v[L];
};
template <size_t L>
struct F32 {
  float v[L];
};
template <size_t L>
struct Bytes {  // one vector: 4 bytes per 32-bit lane
  uint8_t b[4 * L];
};
struct X4Bytes {  // 4 activation bytes broadcast to every lane
  int8_t b[4];
};

inline X4Bytes bcast4(const int8_t* p) {
  X4Bytes x;
  std::memcpy(x.b, p, 4);
  return x;
}

template <size_t L>
struct FloatOps {
  using F = F32<L>;
  static F set1(float a) {
    F r;
    std::fill(r.v, r.v + L, a);
    return r;
  }
  static F mul(F a, F b) {
    for (size_t l = 0; l < L; ++l) a.v[l] *= b.v[l];
    return a;
  }
  static F cvt(I32<L> a) {
    F r;
    for (size_t l = 0; l < L; ++l) r.v[l] = static_cast<float>(a.v[l]);
    return r;
  }
  static F fma(F a, F b, F c) {
    for (size_t l = 0; l < L; ++l) c.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return c;
  }
  static F scales(const uint8_t* p) {
    F r;
    for (size_t l = 0; l < L; ++l) {
      uint16_t h;
      std::memcpy(&h, p + 2 * l, 2);
      r.v[l] = f16_to_f32(h);
    }
    return r;
  }
  // v = acc + bias; v = gelu(v); y (+)= v, element by element (the order of
  // every Ops' epilogue).
  template <size_t R, size_t V>
  static void finish(F (&acc)[R][V], const TileOut& o) {
    for (size_t i = 0; i < R; ++i) {
      float row[V * L];
      for (size_t v = 0; v < V; ++v) std::memcpy(row + v * L, acc[i][v].v, sizeof acc[i][v].v);
      if (o.bias)
        for (size_t c = 0; c < o.ncols; ++c) row[c] = row[c] + o.bias[c];
      quant_gelu(o.e.act, row, o.ncols);
      float* dst = o.y + i * o.ldy;
      for (size_t c = 0; c < o.ncols; ++c) dst[c] = o.e.accumulate ? dst[c] + row[c] : row[c];
    }
  }
};

// VPDPBUSD: each lane plus the 4 products of its unsigned bytes of w with the
// signed bytes of x, in int32 (wrapping, not saturating).
template <size_t L>
I32<L> dpbusd(I32<L> a, const Bytes<L>& w, const X4Bytes& x) {
  for (size_t l = 0; l < L; ++l) {
    int32_t s = 0;
    for (size_t k = 0; k < 4; ++k) s += int32_t(w.b[4 * l + k]) * int32_t(x.b[k]);
    a.v[l] = static_cast<int32_t>(static_cast<uint32_t>(a.v[l]) + static_cast<uint32_t>(s));
  }
  return a;
}

struct Vnni16 : FloatOps<16> {
  static constexpr size_t kLanes = 16, kVectorsPerPanel = 1, kMR = 6, kNP = 2;
  template <bool Q4>
  static constexpr bool kPrefetchScalesLast = true;
  using I = I32<16>;
  using B = Bytes<16>;
  struct Nibbles {
    B lo, hi;
  };
  struct Split {
    I lo, hi;
  };
  struct X4 {
    X4Bytes lo, hi;
  };
  template <size_t V, size_t R>
  static constexpr bool kFromMemory = V == 1 && R > 1;

  template <bool Q4, size_t V>
  static auto load(const uint8_t* p) {
    B w;
    std::memcpy(w.b, p, sizeof w.b);
    if constexpr (!Q4) {
      for (auto& b : w.b) b ^= 0x80;
      return w;
    } else {
      Nibbles n;
      for (size_t i = 0; i < sizeof w.b; ++i) {
        n.lo.b[i] = w.b[i] & 0x0F;
        n.hi.b[i] = V == 1 ? w.b[i] & 0xF0 : (w.b[i] >> 4) & 0x0F;
      }
      return n;
    }
  }
  template <bool Q4, size_t V, size_t R>
  static auto bcast(const int8_t* xq) {
    if constexpr (kFromMemory<V, R>)
      return xq;
    else if constexpr (Q4)
      return X4{bcast4(xq), bcast4(xq + 4)};
    else
      return bcast4(xq);
  }
  template <bool Q4, size_t V>
  static auto begin(int32_t sum_x) {
    I init;
    std::fill(init.v, init.v + 16, -(Q4 ? 8 : 128) * sum_x);
    if constexpr (Q4 && V == 1)
      return Split{init, I{}};
    else
      return init;
  }
  static I dot(const I& a, const B& w, const X4Bytes& x) { return dpbusd(a, w, x); }
  static I dot(const I& a, const B& w, const int8_t* x) { return dpbusd(a, w, bcast4(x)); }
  static X4Bytes lo(const X4& x) { return x.lo; }
  static X4Bytes hi(const X4& x) { return x.hi; }
  static const int8_t* lo(const int8_t* x) { return x; }
  static const int8_t* hi(const int8_t* x) { return x + 4; }
  template <bool Q4, size_t V, class A, class W, class X>
  static void step(A& a, const W& w, const X& x) {
    if constexpr (!Q4) {
      a = dot(a, w, x);
    } else if constexpr (V == 1) {
      a.lo = dot(a.lo, w.lo, lo(x));
      a.hi = dot(a.hi, w.hi, hi(x));
    } else {
      a = dot(dot(a, w.lo, lo(x)), w.hi, hi(x));
    }
  }
  template <bool Q4, size_t V, class A>
  static I end(const A& a, int32_t) {
    if constexpr (Q4 && V == 1) {
      I r;
      for (size_t l = 0; l < 16; ++l) r.v[l] = a.lo.v[l] + (a.hi.v[l] >> 4);  // VPSRAD: arithmetic
      return r;
    } else {
      return a;
    }
  }
};

struct Madd8 : FloatOps<8> {
  static constexpr size_t kLanes = 8, kVectorsPerPanel = 2, kMR = 3, kNP = 1;
  template <bool Q4>
  static constexpr bool kPrefetchScalesLast = Q4;
  using I = I32<8>;
  using B = Bytes<8>;
  struct Nibbles {
    B lo, hi;
  };
  struct X8 {
    X4Bytes x, ax;
  };
  struct X4 {
    X4Bytes lo, hi;
  };
  struct Q4Acc {
    int16_t s16[16];
  };

  static int16_t sat16(int32_t v) { return static_cast<int16_t>(std::clamp(v, -32768, 32767)); }
  static int16_t wrap16(int32_t v) { return static_cast<int16_t>(static_cast<uint16_t>(static_cast<uint32_t>(v))); }
  // VPMADDUBSW: word j = sat16(u[2j] * s[2j] + u[2j+1] * s[2j+1]), unsigned
  // bytes of a times signed bytes of b (here b repeats every 4 bytes).
  static void maddubs(const uint8_t* u, const int8_t* s4, int16_t* out) {
    for (size_t j = 0; j < 16; ++j)
      out[j] = sat16(int32_t(u[2 * j]) * s4[(2 * j) % 4] + int32_t(u[2 * j + 1]) * s4[(2 * j + 1) % 4]);
  }

  template <bool Q4, size_t V>
  static auto load(const uint8_t* p) {
    B w;
    std::memcpy(w.b, p, sizeof w.b);
    if constexpr (Q4) {
      Nibbles n;
      for (size_t i = 0; i < sizeof w.b; ++i) {
        n.lo.b[i] = w.b[i] & 0x0F;
        n.hi.b[i] = (w.b[i] >> 4) & 0x0F;
      }
      return n;
    } else {
      return w;
    }
  }
  template <bool Q4, size_t V, size_t R>
  static auto bcast(const int8_t* xq) {
    if constexpr (Q4) {
      return X4{bcast4(xq), bcast4(xq + 4)};
    } else {
      X8 r{bcast4(xq), {}};
      for (size_t k = 0; k < 4; ++k)  // VPSIGNB(x, x) = |x|
        r.ax.b[k] = static_cast<int8_t>(r.x.b[k] < 0 ? -r.x.b[k] : r.x.b[k]);
      return r;
    }
  }
  template <bool Q4, size_t V>
  static auto begin(int32_t) {
    if constexpr (Q4)
      return Q4Acc{};
    else
      return I{};
  }
  template <bool Q4, size_t V, class A, class W, class X>
  static void step(A& a, const W& w, const X& x) {
    if constexpr (Q4) {
      int16_t lo[16], hi[16];
      maddubs(w.lo.b, x.lo.b, lo);
      maddubs(w.hi.b, x.hi.b, hi);
      for (size_t j = 0; j < 16; ++j) a.s16[j] = wrap16(a.s16[j] + wrap16(lo[j] + hi[j]));
    } else {
      // VPSIGNB(w, x): w negated where x < 0, zero where x == 0.
      int8_t sw[32];
      for (size_t i = 0; i < 32; ++i) {
        const int8_t xs = x.x.b[i % 4];
        const int8_t wi = static_cast<int8_t>(w.b[i]);
        sw[i] = xs < 0 ? static_cast<int8_t>(-wi) : xs == 0 ? int8_t(0) : wi;
      }
      // VPMADDUBSW(|x| as unsigned, sign(w, x)), then VPMADDWD with ones.
      for (size_t j = 0; j < 16; ++j) {
        const int16_t pr = sat16(int32_t(uint8_t(x.ax.b[(2 * j) % 4])) * sw[2 * j] +
                                 int32_t(uint8_t(x.ax.b[(2 * j + 1) % 4])) * sw[2 * j + 1]);
        a.v[j / 2] += pr;
      }
    }
  }
  template <bool Q4, size_t V, class A>
  static I end(const A& a, int32_t sum_x) {
    if constexpr (Q4) {
      I r;
      for (size_t l = 0; l < 8; ++l) r.v[l] = -8 * sum_x + int32_t(a.s16[2 * l]) + int32_t(a.s16[2 * l + 1]);
      return r;
    } else {
      return a;
    }
  }
};

template <class Ops>
const QuantKernels& table(const char* name) {
  static const QuantKernels k =
      quant_kernels<&quant_tile::gemm_panels<Ops, false>, &quant_tile::gemm_panels<Ops, true>>(
          name, scalar_quant_kernels().quantize_rows, &scalar_quant_kernels().matmul);
  return k;
}

}  // namespace emulated

// quant_tile.hpp's matmul over the emulated Vnni16 and Madd8 operations.
inline std::vector<const QuantKernels*> emulated_quant_kernels() {
  return {&emulated::table<emulated::Vnni16>("emulated_avx512vnni"),
          &emulated::table<emulated::Madd8>("emulated_avx2")};
}

}  // namespace
}  // namespace mmgpt::kernels::detail
