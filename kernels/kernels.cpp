// The public entry points: pick the active instantiation and split large
// work over threads with oneTBB. Work is split over independent outputs
// (output columns of a matmul, rows of a layernorm, elements of an
// elementwise op), never over a reduction, and chunk boundaries come from a
// fixed grain with simple_partitioner, so results do not depend on the thread
// count.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"
#include "kernels/registry.hpp"

namespace mmgpt::kernels {
namespace {

// Below about this many multiply-adds a task costs more to schedule than to run.
constexpr size_t kMinWorkPerTask = size_t{1} << 16;
// Elementwise chunks: a multiple of every vector width, so only the last
// chunk of an array has a tail.
constexpr size_t kElementChunk = size_t{1} << 14;

size_t ceil_div(size_t a, size_t b) { return a / b + (a % b != 0); }

// Calls f(begin, end) for the chunks [c*grain, min(n, (c+1)*grain)) of
// [0, n), in parallel when there is more than one. The chunks are fixed by n
// and grain alone, whatever the number of threads.
template <class F>
void for_chunks(size_t n, size_t grain, F f) {
  if (n <= grain) {
    if (n > 0) f(size_t{0}, n);
    return;
  }
  const size_t chunks = ceil_div(n, grain);
  mmgpt::parallel_for(
      tbb::blocked_range<size_t>(0, chunks, 1),
      [&](const tbb::blocked_range<size_t>& r) {
        for (size_t c = r.begin(); c < r.end(); ++c) f(c * grain, std::min(n, (c + 1) * grain));
      },
      tbb::simple_partitioner());
}

}  // namespace

size_t panel_range_grain(size_t M, size_t K, size_t N, size_t threads) {
  const size_t panels = panel_count(N);
  // Ranges own whole panels (each streams its own part of W), at least
  // kMinWorkPerTask each. Prefill: about two ranges per thread, since each
  // tile of panels re-reads all of x (from L2/L3). Decode: at most four per
  // thread, enough to even out the threads; a panel streams in so little time
  // that more ranges would make the cost per task a noticeable part of a
  // step. The split never changes a result (docs/kernels.md, "The GEMM"),
  // only the speed.
  const size_t per_panel = std::max<size_t>(M * K * kPanelWidth, 1);
  size_t grain = ceil_div(kMinWorkPerTask, per_panel);
  grain = std::max(grain, ceil_div(panels, (M > 1 ? 2 : 4) * std::max<size_t>(threads, 1)));
  // Whole tiles: decode and GEMM tiles are at most 2 panels, and 16-bit
  // panels are stored in pairs (panel_layout.hpp).
  return ceil_div(grain, 2) * 2;
}

PanelProduct::PanelProduct(const float* x, const void* wp, WeightType type, const float* bias, float* y, size_t M,
                           size_t K, size_t N, Epilogue e)
    : wp_(wp), type_(type), bias_(bias), y_(y), M_(M), K_(K), N_(N), e_(e) {
  x_.f32 = x;
  if (M == 0 || N == 0) return;
  // x in the form the weight type's kernels want, into buffers of this
  // thread that the next product made on it reuses.
  switch (detail::active_set().matmul[static_cast<size_t>(type)]->x) {
    case detail::XForm::F32: break;
    case detail::XForm::Q8Blocks: {
      thread_local std::vector<int8_t> q;
      thread_local std::vector<float> scale;
      thread_local std::vector<int32_t> sum;
      const size_t Kb = quant_blocks(K);
      if (q.size() < M * Kb * kQuantBlock) q.resize(M * Kb * kQuantBlock);
      if (scale.size() < M * Kb) scale.resize(M * Kb), sum.resize(M * Kb);
      quantize_rows(x, M, K, q.data(), scale.data(), sum.data());
      x_.q8 = QuantizedRows{q.data(), scale.data(), sum.data(), Kb};
      break;
    }
    case detail::XForm::Bf16Rows: {
      // Rows of even length, for every M (so a row's result never depends on M).
      thread_local std::vector<uint16_t> xb;
      const size_t Kp = detail::bf16dot_row_elems(K);
      if (xb.size() < M * Kp) xb.resize(M * Kp);
      for_chunks(M, ceil_div(kMinWorkPerTask, std::max<size_t>(K, 1)), [&, out = xb.data()](size_t r0, size_t r1) {
        detail::bf16dot_round_rows(x + r0 * K, r1 - r0, K, out + r0 * Kp);
      });
      x_.bf16 = xb.data();
      break;
    }
  }
}

void PanelProduct::run(size_t p0, size_t p1) const {
  if (M_ == 0 || p0 >= p1) return;
  const detail::MatmulKernels& k = *detail::active_set().matmul[static_cast<size_t>(type_)];
  k.panels[static_cast<size_t>(type_)](x_, wp_, bias_, y_, M_, K_, N_, p0, p1, e_);
}

void matmul_packed(const float* x, const float* wp, const float* bias, float* y, size_t M, size_t K, size_t N,
                   Epilogue e) {
  matmul_packed(x, wp, WeightType::F32, bias, y, M, K, N, e);
}

void matmul_packed(const float* x, const void* wp, WeightType type, const float* bias, float* y, size_t M, size_t K,
                   size_t N, Epilogue e) {
  if (M == 0 || N == 0) return;
  // x prepared once on this thread, then its panels in parallel.
  const PanelProduct product(x, wp, type, bias, y, M, K, N, e);
  for_chunks(panel_count(N), panel_range_grain(M, K, N, mmgpt::thread_budget()),
             [&](size_t p0, size_t p1) { product.run(p0, p1); });
}

void attention_row(const float* q, const float* k, const float* v, size_t n, size_t hd, float scale, float* s,
                   float* out) {
  attention_heads(q, k, v, WeightType::F32, n, 1, hd, contiguous_rows(n), scale, s, out);
}

void quantize_rows(const float* x, size_t M, size_t K, int8_t* q, float* scale, int32_t* sum) {
  if (M == 0 || K == 0) return;
  const auto& t = detail::active_set();
  const size_t Kb = quant_blocks(K);
  const size_t grain = ceil_div(kMinWorkPerTask, K);
  for_chunks(M, grain, [&](size_t r0, size_t r1) {
    t.quantize_rows(x + r0 * K, r1 - r0, K, q + r0 * Kb * kQuantBlock, scale + r0 * Kb, sum + r0 * Kb);
  });
}

void attention_queries(const float* q, size_t q_stride, const void* k, const void* v, WeightType kv, size_t n,
                       size_t queries, size_t heads, size_t hd, KVBlocks at, float scale, float* s, float* out,
                       size_t out_stride, size_t window) {
  if (n + queries > 1 && (at.block == 0 || at.block % kKVBlockMultiple != 0))
    throw std::invalid_argument("attention: the block of positions must be a positive multiple of " +
                                std::to_string(kKVBlockMultiple));
  const detail::AttentionKernel attend = detail::active_set().attention[static_cast<size_t>(kv)];
  if (attend == nullptr) throw std::invalid_argument("attention: a KV cache holds f32, bf16 or f16");
  attend(q, q_stride, k, v, n, queries, heads, hd, at, scale, s, out, out_stride, window);
}

void attention_heads(const float* q, const void* k, const void* v, WeightType kv, size_t n, size_t heads, size_t hd,
                     KVBlocks at, float scale, float* s, float* out, size_t window) {
  attention_queries(q, 0, k, v, kv, n, 1, heads, hd, at, scale, s, out, 0, window);
}

void narrow(const float* in, size_t n, WeightType to, uint16_t* out) {
  if (to == WeightType::F16)
    detail::active_set().narrow_f16(in, n, out);
  else
    narrow_to_bf16(in, n, out);  // integer arithmetic: the compiler vectorizes it as it is
}

void store_kv(const float* in, size_t n, WeightType kv, void* out) {
  if (kv == WeightType::F32)
    std::memcpy(out, in, n * sizeof(float));
  else
    narrow(in, n, kv, static_cast<uint16_t*>(out));
}

float dot(const float* a, const float* b, size_t n) { return detail::active_set().dot(a, b, n); }

void axpy(float a, const float* x, float* y, size_t n) {
  const auto& t = detail::active_set();
  for_chunks(n, kElementChunk, [&](size_t i0, size_t i1) { t.axpy(a, x + i0, y + i0, i1 - i0); });
}

void add(float* y, const float* x, size_t n) {
  const auto& t = detail::active_set();
  for_chunks(n, kElementChunk, [&](size_t i0, size_t i1) { t.add(y + i0, x + i0, i1 - i0); });
}

void layernorm(const float* x, const float* gamma, const float* beta, float* y, size_t rows, size_t dim, float eps) {
  if (dim == 0) return;
  const auto& t = detail::active_set();
  const size_t grain = ceil_div(kMinWorkPerTask, dim);
  for_chunks(rows, grain,
             [&](size_t r0, size_t r1) { t.layernorm(x + r0 * dim, gamma, beta, y + r0 * dim, r1 - r0, dim, eps); });
}

void gelu_erf(float* x, size_t n) {
  const auto& t = detail::active_set();
  for_chunks(n, kElementChunk, [&](size_t i0, size_t i1) { t.gelu_erf(x + i0, i1 - i0); });
}

void gelu_tanh(float* x, size_t n) {
  const auto& t = detail::active_set();
  for_chunks(n, kElementChunk, [&](size_t i0, size_t i1) { t.gelu_tanh(x + i0, i1 - i0); });
}

// One row: a reduction, so never split.
void softmax(float* x, size_t n) { detail::active_set().softmax(x, n); }

void rmsnorm(const float* x, const float* gamma, float* y, size_t rows, size_t dim, float eps) {
  if (dim == 0) return;
  const auto& t = detail::active_set();
  const size_t grain = ceil_div(kMinWorkPerTask, dim);
  for_chunks(rows, grain,
             [&](size_t r0, size_t r1) { t.rmsnorm(x + r0 * dim, gamma, y + r0 * dim, r1 - r0, dim, eps); });
}

void glu(const float* in, float* out, size_t rows, size_t ff, Gate act) {
  if (ff == 0) return;
  const auto& t = detail::active_set();
  const size_t grain = ceil_div(kElementChunk, ff);
  for_chunks(rows, grain, [&](size_t r0, size_t r1) { t.glu(in + r0 * 2 * ff, out + r0 * ff, r1 - r0, ff, act); });
}

void softcap(float* x, size_t n, float cap) {
  const auto& t = detail::active_set();
  for_chunks(n, kElementChunk, [&](size_t i0, size_t i1) { t.softcap(x + i0, i1 - i0, cap); });
}

void rope(float* x, size_t heads, size_t hd, size_t rot, const float* cos, const float* sin, bool interleaved) {
  detail::active_set().rope(x, heads, hd, rot, cos, sin, interleaved);
}

}  // namespace mmgpt::kernels
