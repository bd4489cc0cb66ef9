#include "tools/convert/tensor_ops.hpp"

#include <algorithm>
#include <cstring>

#include <tbb/blocked_range.h>
#include <tbb/partitioner.h>

#include "formats/error.hpp"
#include "kernels/parallel.hpp"

namespace mmgpt::convert {

namespace {

uint64_t rows_per_piece(uint64_t row_size) {
  return std::max<uint64_t>(1, kPieceBytes / sizeof(float) / std::max<uint64_t>(1, row_size));
}

}  // namespace

TensorPtr transpose2d(TensorPtr t) {
  if (t->shape.size() != 2 || !t->readable())
    throw Error("internal: transpose2d needs a 2-D tensor, got " + shape_str(t->shape));
  const uint64_t rows = t->shape[0], cols = t->shape[1];
  auto out = std::make_shared<HostTensor>();
  out->shape = {cols, rows};
  out->source_dtype = t->source_dtype;
  // Output rows [first, first + count) are the source's columns: the source is
  // read a piece of rows at a time and the wanted columns copied out in 16 x 16
  // tiles, each read and written a whole 64-byte line per row.
  out->reader = [t = std::move(t), rows, cols](uint64_t first, uint64_t count, float* dst) {
    const uint64_t piece = rows_per_piece(cols);
    Scratch<float> scratch(std::min(piece, rows) * cols);
    float* buf = scratch.get();
    for (uint64_t r0 = 0; r0 < rows; r0 += piece) {
      const uint64_t n = std::min(piece, rows - r0);
      t->read_rows(r0, n, buf);
      constexpr uint64_t B = 64, T = 16;
      mmgpt::parallel_for(
          tbb::blocked_range<uint64_t>(0, (count + B - 1) / B, 1),
          [&](const tbb::blocked_range<uint64_t>& blocks) {
            float tile[T][T];
            const uint64_t c_end = std::min(count, blocks.end() * B);
            for (uint64_t c0 = blocks.begin() * B; c0 < c_end; c0 += T)
              for (uint64_t rt = 0; rt < n; rt += T) {
                const uint64_t nc = std::min(T, c_end - c0), nr = std::min(T, n - rt);
                if (nc == T && nr == T) {
                  for (uint64_t r = 0; r < T; ++r)
                    for (uint64_t c = 0; c < T; ++c) tile[c][r] = buf[(rt + r) * cols + first + c0 + c];
                  for (uint64_t c = 0; c < T; ++c)
                    std::memcpy(dst + (c0 + c) * rows + r0 + rt, tile[c], sizeof tile[c]);
                } else {
                  for (uint64_t r = 0; r < nr; ++r)
                    for (uint64_t c = 0; c < nc; ++c)
                      dst[(c0 + c) * rows + r0 + rt + r] = buf[(rt + r) * cols + first + c0 + c];
                }
              }
          },
          tbb::auto_partitioner());
    }
  };
  return out;
}

TensorPtr concat_rows(std::vector<TensorPtr> parts) {
  if (parts.empty()) throw Error("internal: concat_rows of nothing");
  auto out = std::make_shared<HostTensor>();
  out->shape = parts[0]->shape;
  out->source_dtype = parts[0]->source_dtype;
  if (out->shape.empty()) throw Error("internal: concat_rows of scalars");
  out->shape[0] = 0;
  for (const TensorPtr& p : parts) {
    if (p->shape.size() != parts[0]->shape.size() ||
        !std::equal(p->shape.begin() + 1, p->shape.end(), parts[0]->shape.begin() + 1))
      throw Error("internal: concat_rows of mismatched shapes " + shape_str(p->shape) + " and " +
                  shape_str(parts[0]->shape));
    if (!p->readable()) throw Error("internal: concat_rows of a placeholder");
    out->shape[0] += p->shape[0];
  }
  const uint64_t row = out->row_size();
  out->reader = [parts = std::move(parts), row](uint64_t first, uint64_t count, float* dst) {
    uint64_t start = 0;  // the first row of the current part
    for (const TensorPtr& p : parts) {
      const uint64_t end = start + p->shape[0];
      if (first < end && first + count > start) {
        const uint64_t lo = std::max(first, start), hi = std::min(first + count, end);
        p->read_rows(lo - start, hi - lo, dst + (lo - first) * row);
      }
      start = end;
    }
  };
  return out;
}

TensorPtr slice_rows(TensorPtr t, uint64_t first, uint64_t count) {
  if (t->shape.empty() || !t->readable() || first > t->shape[0] || count > t->shape[0] - first)
    throw Error("internal: slice_rows [" + std::to_string(first) + ", +" + std::to_string(count) + ") of " +
                shape_str(t->shape));
  auto out = std::make_shared<HostTensor>();
  out->shape = t->shape;
  out->shape[0] = count;
  out->source_dtype = t->source_dtype;
  out->reader = [t = std::move(t), first](uint64_t r, uint64_t n, float* dst) { t->read_rows(first + r, n, dst); };
  return out;
}

bool same_values(const HostTensor& a, const HostTensor& b) {
  if (&a == &b) return true;
  if (a.shape != b.shape) return false;
  const uint64_t row = a.row_size(), piece = rows_per_piece(row);
  std::vector<float> x(static_cast<size_t>(std::min(piece, a.rows()) * row)), y(x.size());
  for (uint64_t r = 0; r < a.rows(); r += piece) {
    const uint64_t n = std::min(piece, a.rows() - r);
    a.read_rows(r, n, x.data());
    b.read_rows(r, n, y.data());
    if (std::memcmp(x.data(), y.data(), n * row * sizeof(float)) != 0) return false;
  }
  return true;
}

}  // namespace mmgpt::convert
