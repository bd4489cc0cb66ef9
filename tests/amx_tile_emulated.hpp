#pragma once
// kernels/simd/amx_tile.hpp's matmuls over tile operations written in plain
// C++, each the instruction it stands for as the Intel SDM defines it:
//   LDTILECFG (palette 1: 8 tiles of at most 16 rows x 64 bytes; every tile
//   zeroed), TILERELEASE, TILEZERO, TILELOADD, TILESTORED (rows and bytes per
//   row from the configuration), TDPBSSD (signed bytes, int32 sums that wrap)
//   and TDPBF16PS (per row and 16 pairs of k: an even and an odd chain of
//   FMAs from zero, each rounded to nearest even with DAZ and FTZ, then their
//   sum added to the tile), with the checks that fault on hardware (an
//   unconfigured tile, shapes that do not chain, one tile used twice) as
//   exceptions.
// So the tile configurations, the blockings and the edges of the AMX kernels
// are checked against the scalar references on every host, also where the
// CPU has no AMX. Included by test_kernels_quant.cpp and
// test_kernels_bf16dot.cpp only (internal linkage).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "kernels/registry.hpp"
#include "kernels/scalar/bf16dot_loop.hpp"
#include "kernels/simd/amx_tile.hpp"
#include "quant_tile_emulated.hpp"

namespace mmgpt::kernels::detail {
namespace {
namespace emulated {

struct TileState {
  amx_tile::TileConfig cfg;
  bool configured = false;
  uint8_t data[8][16][64] = {};
};
inline TileState& tiles() {
  thread_local TileState s;
  return s;
}

struct AmxOps : FloatOps<16> {
  static constexpr size_t kMinRows = amx_tile::kTileRows;
  using F = F32<16>;

  static void fault(const std::string& what) { throw std::logic_error("emulated AMX: " + what); }
  static size_t rows(int t) { return tiles().cfg.rows[t]; }
  static size_t colsb(int t) { return tiles().cfg.colsb[t]; }
  static void need(int t) {
    if (!tiles().configured) fault("tile instruction before LDTILECFG");
    if (rows(t) == 0) fault("tile " + std::to_string(t) + " not configured");
  }

  static void configure(const amx_tile::TileConfig& c) {
    if (c.palette != 1 || c.start_row != 0) fault("palette 1 from row 0 expected");
    for (uint8_t b : c.reserved)
      if (b != 0) fault("reserved bytes set");
    for (int t = 0; t < 16; ++t) {
      if (t >= 8 && (c.rows[t] != 0 || c.colsb[t] != 0)) fault("palette 1 has 8 tiles");
      if (c.rows[t] > 16 || c.colsb[t] > 64) fault("tile larger than 16 rows x 64 bytes");
      if ((c.rows[t] == 0) != (c.colsb[t] == 0)) fault("rows and bytes of a tile must be both zero or both set");
    }
    TileState& s = tiles();
    s.cfg = c;
    s.configured = true;
    std::memset(s.data, 0, sizeof s.data);
  }
  static void release() {
    TileState& s = tiles();
    s.configured = false;
    std::memset(s.data, 0, sizeof s.data);
  }
  template <int T>
  static void zero() {
    need(T);
    std::memset(tiles().data[T], 0, sizeof tiles().data[T]);
  }
  template <int T>
  static void load(const void* p, size_t stride) {
    need(T);
    auto& d = tiles().data[T];
    std::memset(d, 0, sizeof d);
    for (size_t r = 0; r < rows(T); ++r) std::memcpy(d[r], static_cast<const uint8_t*>(p) + r * stride, colsb(T));
  }
  template <int T>
  static void store(void* p, size_t stride) {
    need(T);
    for (size_t r = 0; r < rows(T); ++r) std::memcpy(static_cast<uint8_t*>(p) + r * stride, tiles().data[T][r], colsb(T));
  }
  // dst.rows = a.rows, a.colsb = 4 b.rows, dst.colsb = b.colsb, three tiles.
  static void check_shapes(int c, int a, int b) {
    need(c), need(a), need(b);
    if (c == a || c == b || a == b) fault("a tile used twice in one product");
    if (rows(c) != rows(a) || colsb(a) != 4 * rows(b) || colsb(c) != colsb(b) || colsb(a) % 4 != 0)
      fault("tile shapes do not chain");
  }
  template <int C, int A, int B>
  static void dpbssd() {
    check_shapes(C, A, B);
    TileState& s = tiles();
    for (size_t m = 0; m < rows(C); ++m)
      for (size_t n = 0; n < colsb(C) / 4; ++n) {
        int32_t acc;
        std::memcpy(&acc, s.data[C][m] + 4 * n, 4);
        uint32_t u = static_cast<uint32_t>(acc);
        for (size_t k = 0; k < colsb(A) / 4; ++k)
          for (size_t i = 0; i < 4; ++i)
            u += static_cast<uint32_t>(int32_t(int8_t(s.data[A][m][4 * k + i])) *
                                       int32_t(int8_t(s.data[B][k][4 * n + i])));
        acc = static_cast<int32_t>(u);
        std::memcpy(s.data[C][m] + 4 * n, &acc, 4);
      }
  }
  template <int C, int A, int B>
  static void dpbf16ps() {
    check_shapes(C, A, B);
    TileState& s = tiles();
    auto bf16 = [](const uint8_t* p) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return flush_subnormal(bf16_to_f32(h));  // DAZ
    };
    for (size_t m = 0; m < rows(C); ++m)
      for (size_t n = 0; n < colsb(C) / 4; ++n) {
        float even = 0.0f, odd = 0.0f;
        for (size_t k = 0; k < colsb(A) / 4; ++k) {
          even = flush_subnormal(std::fma(bf16(s.data[A][m] + 4 * k), bf16(s.data[B][k] + 4 * n), even));
          odd = flush_subnormal(std::fma(bf16(s.data[A][m] + 4 * k + 2), bf16(s.data[B][k] + 4 * n + 2), odd));
        }
        float acc;
        std::memcpy(&acc, s.data[C][m] + 4 * n, 4);
        acc = flush_subnormal(flush_subnormal(acc) + flush_subnormal(even + odd));
        std::memcpy(s.data[C][m] + 4 * n, &acc, 4);
      }
  }

  static F cvt(const int32_t* p) {
    F r;
    for (size_t l = 0; l < 16; ++l) r.v[l] = static_cast<float>(p[l]);
    return r;
  }
  static F load(const float* p) {
    F r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static void unpack_q4(const uint8_t* line, int8_t* lo, int8_t* hi) {
    for (size_t i = 0; i < 64; ++i) {
      lo[i] = static_cast<int8_t>((line[i] & 0x0F) - 8);
      hi[i] = static_cast<int8_t>((line[i] >> 4) - 8);
    }
  }
  static void interleave(const uint16_t* line, uint16_t* row) {
    for (size_t j = 0; j < 16; ++j) row[2 * j] = line[j], row[2 * j + 1] = line[16 + j];
  }
  // Below a tile's rows: the references' sums (the vector kernels give their
  // bits, which test_kernels_quant.cpp and test_kernels_bf16dot.cpp check
  // apart), finished as the kernels finish them (the vector GELU).
  static void rows_of(PanelKernel ref, const PreparedX& x, const void* w, const float* bias, float* y, size_t M,
                      size_t K, size_t N, size_t p0, size_t p1, Epilogue e) {
    std::vector<float> sums(M * N);
    ref(x, w, bias, sums.data(), M, K, N, p0, p1, {});
    const size_t c0 = p0 * kPanelWidth, c1 = p1 * kPanelWidth < N ? p1 * kPanelWidth : N;
    for (size_t m = 0; m < M; ++m) {
      float* v = sums.data() + m * N + c0;
      quant_gelu(e.act, v, c1 - c0);
      for (size_t c = c0; c < c1; ++c) y[m * N + c] = e.accumulate ? y[m * N + c] + v[c - c0] : v[c - c0];
    }
  }
  template <bool Q4>
  static void quant_rows(const PreparedX& x, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N,
                         size_t p0, size_t p1, Epilogue e) {
    rows_of(scalar_quant_kernels().matmul.panels[static_cast<size_t>(Q4 ? WeightType::Q4_0 : WeightType::Q8_0)], x, w,
            bias, y, M, K, N, p0, p1, e);
  }
  static void bf16_rows(const PreparedX& x, const void* w, const float* bias, float* y, size_t M, size_t K, size_t N,
                        size_t p0, size_t p1, Epilogue e) {
    rows_of(scalar_tdpbf16ps_kernels().panels[static_cast<size_t>(WeightType::BF16)], x, w, bias, y, M, K, N, p0, p1,
            e);
  }
};

}  // namespace emulated

// amx_tile.hpp's kernels over the emulated tiles.
inline const QuantKernels& emulated_amx_int8_kernels() {
  static const QuantKernels k = [] {
    QuantKernels q{{"emulated_amx_int8", XForm::Q8Blocks, {}, &scalar_quant_kernels().matmul},
                   scalar_quant_kernels().quantize_rows};
    q.matmul.panels[static_cast<size_t>(WeightType::Q8_0)] = &amx_tile::quant_panels<emulated::AmxOps, false>;
    q.matmul.panels[static_cast<size_t>(WeightType::Q4_0)] = &amx_tile::quant_panels<emulated::AmxOps, true>;
    return q;
  }();
  return k;
}
inline const MatmulKernels& emulated_amx_bf16_kernels() {
  static const MatmulKernels k = [] {
    MatmulKernels m{"emulated_amx_bf16", XForm::Bf16Rows, {}, &scalar_tdpbf16ps_kernels()};
    m.panels[static_cast<size_t>(WeightType::BF16)] = &amx_tile::bf16_panels<emulated::AmxOps>;
    return m;
  }();
  return k;
}

}  // namespace
}  // namespace mmgpt::kernels::detail
