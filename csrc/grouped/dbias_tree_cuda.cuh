// The tree cut of the grouped dbias kernel (grouped/dbias_cuda.cu):
// which rows each warp, chunk and slot of the kernel adds, so that the sum of
// a group comes out as the canonical tree sum of common/tree_sum.h bit for
// bit. Plain host/device code, checked on the host against TreeSum by
// tests/grouped_dbias_tree_cuda_test.cc.
//
// The canonical tree over n rows (split at h = ceil(n/2)) is the even/odd
// split of the row indices: at depth d, the node with path p (d bits, MSB =
// first turn, 1 = right) holds the rows i < n with i = rev_d(p) (mod 2^d)
// (rev_d reverses d bits), so it has ceil((n - rev_d(p)) / 2^d) rows (0 if
// rev_d(p) >= n), that is floor(n / 2^d) + [rev_d(p) < n mod 2^d]; the nodes
// of one depth lie in path order along the rows. A one-row node splits into
// itself and an empty node, an empty node into two empty ones.
//
// So the canonical tree over n rows is the perfect binary tree of any height
// H >= ceil(log2 n) whose 2^H leaves ("slots") are the rows or empty, an
// empty slot counting as -0.0: x + -0.0 == -0.0 + x == x for every float x
// (+0 included; NaN stays NaN, canonicalised on output), so every add of
// the perfect tree is either an add of the canonical tree or the identity.
// The kernel cuts that perfect tree into
//   * top levels: c cluster-rank bits, then 3 warp bits (the CTA's 8 warps);
//   * s warp levels: each warp walks 2^s consecutive chunks, combining the
//     chunk sums with a binary counter (after chunk q, merge once per
//     trailing one bit of q);
//   * kChunkLevels chunk levels: a chunk = 16 slots, loaded at once and added
//     as a perfect tree in registers (fully unrolled, no bookkeeping).
// The chunk depth is D = max(ceil(log2 n) - 4, c + 3) (so a chunk has at
// most 16 rows) and s = D - c - 3.

#ifndef EQX_QUANT_CSRC_GROUPED_DBIAS_TREE_CUDA_CUH_
#define EQX_QUANT_CSRC_GROUPED_DBIAS_TREE_CUDA_CUH_

#include <cstdint>

#include "common/ceil_log2.h"
#include "common/host_device.h"

namespace eqx_quant::grouped_dbias_tree {

constexpr int kChunkLevels = 4;
constexpr int kChunkSlots = 1 << kChunkLevels;
constexpr int kWarpLevels = 3;  // 8 warps per CTA

// The low `bits` bits of v in reverse order (bits in [0, 32]).
EQX_QUANT_HOST_DEVICE inline uint32_t ReverseBits(uint32_t v, int bits) {
  if (bits == 0) return 0;
#if defined(__CUDA_ARCH__)
  return __brev(v) >> (32 - bits);
#else
  uint32_t r = 0;
  for (int b = 0; b < bits; ++b) r |= ((v >> b) & 1u) << (bits - 1 - b);
  return r;
#endif
}

// rev_4(j) as a compile-time constant (slot j of a chunk holds a row iff
// rev_4(j) < the chunk's rows).
EQX_QUANT_HOST_DEVICE constexpr int SlotKey(int j) {
  return ((j & 1) << 3) | ((j & 2) << 1) | ((j & 4) >> 1) | ((j & 8) >> 3);
}
static_assert(kChunkLevels == 4, "SlotKey reverses 4 bits");

// The node reached from the root of the canonical tree over `count` rows by
// `levels` turns (bit levels-1-l of `path` at level l, 1 = right): its
// first row (relative to the group) and its rows.
EQX_QUANT_HOST_DEVICE inline void DescendNode(int64_t count, uint32_t path,
                                              int levels, int64_t* begin,
                                              int64_t* rows) {
  int64_t first = 0;
  int64_t size = count;
  for (int level = 0; level < levels; ++level) {
    const bool right = ((path >> (levels - 1 - level)) & 1u) != 0;
    const int64_t left = (size + 1) / 2;  // a one-row node: itself + empty
    first += right ? left : 0;
    size = right ? size - left : left;
  }
  *begin = first;
  *rows = size;
}

// Levels between the warp nodes (depth top_levels) and the chunks of a group
// of `count` rows: s = max(ceil(log2 count) - kChunkLevels, top) - top.
EQX_QUANT_HOST_DEVICE inline int WarpChunkLevels(int64_t count,
                                                 int top_levels) {
  const int depth = CeilLog2(count) - kChunkLevels;
  return depth > top_levels ? depth - top_levels : 0;
}

// Rows of chunk q (of 2^levels) of a warp node of `node_rows` rows:
// floor(node_rows / 2^levels) + [rev(q) < node_rows mod 2^levels].
EQX_QUANT_HOST_DEVICE inline int ChunkRows(int64_t node_rows, int levels,
                                           uint32_t q) {
  const int64_t whole = node_rows >> levels;
  const int64_t extra = node_rows & ((int64_t{1} << levels) - 1);
  return static_cast<int>(whole) +
         (static_cast<int64_t>(ReverseBits(q, levels)) < extra ? 1 : 0);
}

// The most warp levels any group of an example with `rows` rows can need
// (the shared-memory stack depth of a warp's binary counter).
inline int MaxWarpChunkLevels(int64_t rows, int top_levels) {
  return WarpChunkLevels(rows, top_levels);
}

}  // namespace eqx_quant::grouped_dbias_tree

#endif  // EQX_QUANT_CSRC_GROUPED_DBIAS_TREE_CUDA_CUH_
