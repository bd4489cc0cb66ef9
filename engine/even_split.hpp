#pragma once
// n items in `parts` consecutive blocks as even as integers allow: block b is
// [even_split_begin(n, parts, b), even_split_begin(n, parts, b + 1)), sizes
// differing by at most one, no block empty while parts <= n. One formula for
// the attention tasks' blocks of heads (attention.cpp) and the KV cache's
// groups of heads (kv_cache.hpp), so a thread's heads are one group of a
// cache made for as many threads, whose keys it then reads as one stream.
#include <cstddef>

namespace mmgpt {

constexpr size_t even_split_begin(size_t n, size_t parts, size_t b) { return b * n / parts; }

// The block holding item i (i < n, parts <= n): the b with begin(b) <= i <
// begin(b + 1).
constexpr size_t even_split_block(size_t n, size_t parts, size_t i) { return ((i + 1) * parts - 1) / n; }

}  // namespace mmgpt
