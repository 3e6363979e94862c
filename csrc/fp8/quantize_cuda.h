// CUDA kernels of eqx_quant_fp8_quantize (sm_90a): per-tensor-scaled FP8
// cast (rowwise and/or transposed colwise), amax and the fused bias gradient.
// The semantics are those of the CPU kernel (fp8/quantize_cpu.h), bit
// for bit.
//
// This header has two parts:
//   * dbias_walk: the bookkeeping that lets one GPU thread add the rows of a
//     dbias tree node in exactly the canonical tree order (common/tree_sum.h)
//     while it streams over them once. Plain C++ usable on the host and the
//     device, so that a host unit test (tests/fp8_quantize_cuda_test.cc) runs
//     the very code the kernels run.
//   * cuda::Fp8Quantize, the launcher the FFI handler calls. No CUDA or XLA
//     types appear here (the stream is passed as the driver's CUstream_st*,
//     which is what cudaStream_t is).

#ifndef EQX_QUANT_CSRC_FP8_QUANTIZE_CUDA_H_
#define EQX_QUANT_CSRC_FP8_QUANTIZE_CUDA_H_

#include <cstdint>
#include <vector>

#include "common/ceil_log2.h"
#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"

#if defined(__CUDACC__)
#define EQX_QUANT_WALK_INLINE __host__ __device__ __forceinline__
#else
#define EQX_QUANT_WALK_INLINE inline __attribute__((always_inline))
#endif
#if defined(__CUDA_ARCH__)
#define EQX_QUANT_WALK_UNROLL _Pragma("unroll")
#else
#define EQX_QUANT_WALK_UNROLL
#endif

struct CUstream_st;

namespace eqx_quant {
namespace dbias_walk {

// ---------------------------------------------------------------------------
// The nested tree of one dbias node.
//
// The reduced axes S[keep:fa] are numbered 0..num_axes-1 (0 = the split axis
// S[keep], outermost). A dbias node is the subtree of the split axis' tree
// over indices [ceil(p*n/P), ceil((p+1)*n/P)) (n = S[keep]); its leaves are
// the trees over the inner axes, and so on down to single rows. The rows of a
// node are contiguous, and a thread visits them in increasing order.
//
// Inner axes of length 1 are dropped (a tree over one value is that value),
// so every inner axis has length 0 or >= 2. The split axis is always kept.

inline constexpr int kMaxAxes = 16;

struct NestedAxes {
  int num_axes = 1;             // >= 1
  int64_t dims[kMaxAxes] = {};  // dims[0] = n, the full split axis
  // strides[a] = rows per index of axis a = prod(dims[a+1..num_axes)).
  int64_t strides[kMaxAxes] = {};
};

// Builds NestedAxes from the reduced dims S[keep:fa]. With no reduced axis
// (keep == fa) the node is a single row: one axis of length 1. Returns false
// if more than kMaxAxes axes remain after dropping the length-1 inner ones.
inline bool BuildNestedAxes(const std::vector<int64_t>& reduced,
                            NestedAxes* axes) {
  NestedAxes out;
  out.num_axes = 1;
  out.dims[0] = reduced.empty() ? 1 : reduced[0];
  for (size_t i = 1; i < reduced.size(); ++i) {
    if (reduced[i] == 1) continue;
    if (out.num_axes == kMaxAxes) return false;
    out.dims[out.num_axes++] = reduced[i];
  }
  int64_t stride = 1;
  for (int a = out.num_axes - 1; a >= 0; --a) {
    out.strides[a] = stride;
    stride *= out.dims[a];
  }
  *axes = out;
  return true;
}

// The number of internal nodes of the canonical tree over [0, count) (split
// at ceil(n/2)) whose last leaf is t: after leaf t is pushed, that many
// merges complete. Walks down from the root, O(log count).
EQX_QUANT_WALK_INLINE int EndMerges(int64_t count, int64_t t) {
  int64_t lo = 0;
  int64_t hi = count;
  int merges = 0;
  while (hi - lo >= 2) {
    if (t == hi - 1) ++merges;
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (t < mid) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return merges;
}

// A subtree of a node's nested tree: `count` consecutive indices of axis
// `axis` (each index spanning strides[axis] rows), starting at node-local row
// `first_row`. rows == 0 marks an empty subtree.
struct Subtree {
  int64_t first_row = 0;
  int64_t rows = 0;
  int axis = 0;
  int64_t count = 0;
};

// Node p of `split` of the split axis (length n = axes.dims[0]), as the
// CPU kernel and the reference define it: indices
// [ceil(p*n/split), ceil((p+1)*n/split)), the node's own tree being the
// canonical one over its count. *first_index receives the first index.
//
// NOTE: for n % split != 0 these ranges are not always the depth-log2(split)
// nodes of the canonical tree over n (n = 27, split = 8: node 5 is [18, 21),
// the formula gives [17, 21)); CanonicalNodeRoot below computes those. The
// kernels follow the formula so as to stay bit-exact with the CPU kernel.
EQX_QUANT_WALK_INLINE Subtree NodeRoot(const NestedAxes& axes, int64_t p,
                                       int64_t split, int64_t* first_index) {
  const int64_t n = axes.dims[0];
  const int64_t begin = (p * n + split - 1) / split;
  const int64_t end = ((p + 1) * n + split - 1) / split;
  Subtree root;
  root.first_row = 0;
  root.count = end - begin;
  root.axis = 0;
  root.rows = root.count * axes.strides[0];
  *first_index = begin;
  return root;
}

// The two children of a non-empty subtree in the nested tree. A subtree with
// one index is the same node as the whole tree of the next axis, so it is
// first rewritten as that; a single row has itself as left child and an
// empty right child (merging with an empty right child is the identity).
EQX_QUANT_WALK_INLINE void SplitSubtree(const NestedAxes& axes, Subtree node,
                                        Subtree* left, Subtree* right) {
  while (node.count == 1 && node.axis + 1 < axes.num_axes) {
    node.axis += 1;
    node.count = axes.dims[node.axis];
  }
  if (node.count <= 1) {
    *left = node;
    *right = Subtree{node.first_row + node.rows, 0, node.axis, 0};
    return;
  }
  const int64_t half = (node.count + 1) / 2;
  const int64_t stride = axes.strides[node.axis];
  *left = Subtree{node.first_row, half * stride, node.axis, half};
  *right = Subtree{node.first_row + half * stride,
                   (node.count - half) * stride, node.axis, node.count - half};
}

// The subtree reached from `root` by `levels` splits, taking at level l the
// right child iff bit (levels-1-l) of `path` is set. Empty stays empty.
EQX_QUANT_WALK_INLINE Subtree DescendSubtree(const NestedAxes& axes,
                                             Subtree root, unsigned path,
                                             int levels) {
  Subtree node = root;
  for (int level = 0; level < levels; ++level) {
    if (node.rows == 0) return node;
    Subtree left;
    Subtree right;
    SplitSubtree(axes, node, &left, &right);
    node = ((path >> (levels - 1 - level)) & 1u) ? right : left;
  }
  return node;
}

// Node p of `split` (a power of two) at depth log2(split) of the canonical
// tree over the split axis, found by descending the tree: the alternative to
// NodeRoot that makes the node sums finish to the canonical tree for any n.
EQX_QUANT_WALK_INLINE Subtree CanonicalNodeRoot(const NestedAxes& axes,
                                                int64_t p, int64_t split,
                                                int64_t* first_index) {
  Subtree node;
  node.count = axes.dims[0];
  node.rows = node.count * axes.strides[0];
  int levels = 0;
  while ((int64_t{1} << levels) < split) ++levels;
  for (int level = 0; level < levels; ++level) {
    const int64_t half = (node.count + 1) / 2;
    const bool right = ((p >> (levels - 1 - level)) & 1) != 0;
    const int64_t first = right ? node.first_row + half * axes.strides[0]
                                : node.first_row;
    node.count = right ? node.count - half : half;
    node.first_row = first;
    node.rows = node.count * axes.strides[0];
  }
  *first_index = axes.strides[0] > 0 ? node.first_row / axes.strides[0] : 0;
  node.first_row = 0;
  return node;
}

// Merges to perform after pushing the subtree's local row `row` (0-based):
// the internal nodes of the nested tree that end at that row, innermost
// first. The inner axes are the full trees dims[axis+1..]; the subtree's own
// axis has `count` indices.
EQX_QUANT_WALK_INLINE int LeafMerges(const NestedAxes& axes,
                                     const Subtree& tree, int64_t row) {
  int merges = 0;
  for (int a = axes.num_axes - 1; a > tree.axis; --a) {
    const int64_t dim = axes.dims[a];
    const int64_t index = row % dim;
    row /= dim;
    merges += EndMerges(dim, index);
    if (index != dim - 1) return merges;
  }
  return merges + EndMerges(tree.count, row);
}

// An upper bound of the partial sums a walk of `tree` keeps below its top
// (the DbiasStack depth): the sum of the tree depths of its axes.
EQX_QUANT_WALK_INLINE int StackBound(const NestedAxes& axes,
                                     const Subtree& tree) {
  int bound = CeilLog2(tree.count);
  for (int a = tree.axis + 1; a < axes.num_axes; ++a) {
    bound += CeilLog2(axes.dims[a]);
  }
  return bound;
}

EQX_QUANT_WALK_INLINE float AddF32(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// The partial sums of one walk: `top` (the most recent completed subtree) and
// below it the pending left siblings, the first kRegLevels of them in
// registers (indexed only by constants: the stack pointer is dispatched
// through a compare chain, uniform across a warp), the rest in `overflow`
// (element e of level l at overflow[(l * kVec + e) * overflow_stride]).
template <int kVec, int kRegLevels>
struct DbiasStack {
  float top[kVec] = {};
  float level[kRegLevels][kVec] = {};
  float* overflow = nullptr;
  int64_t overflow_stride = 1;
  int depth = 0;       // pending left siblings below `top`
  int max_depth = 0;   // statistics for the host test
  bool has_top = false;

  // Pushes leaf `v`, then performs `merges` merges (LeafMerges).
  EQX_QUANT_WALK_INLINE void Leaf(const float (&v)[kVec], int merges) {
    if (merges == 0) {
      if (has_top) {
        StoreLevel<0>(depth);
        ++depth;
#if !defined(__CUDA_ARCH__)
        max_depth = depth > max_depth ? depth : max_depth;
#endif
      }
EQX_QUANT_WALK_UNROLL
      for (int e = 0; e < kVec; ++e) top[e] = v[e];
      has_top = true;
      return;
    }
    // The leaf is a right child: merge it into `top`, its left sibling.
EQX_QUANT_WALK_UNROLL
    for (int e = 0; e < kVec; ++e) top[e] = AddF32(top[e], v[e]);
    for (int m = 1; m < merges; ++m) {
      --depth;
      AddLevelIntoTop<0>(depth);
    }
  }

  // The node's sum (+0 for an empty walk).
  EQX_QUANT_WALK_INLINE void Result(float (&out)[kVec]) const {
EQX_QUANT_WALK_UNROLL
    for (int e = 0; e < kVec; ++e) out[e] = has_top ? top[e] : 0.0f;
  }

 private:
  template <int L>
  EQX_QUANT_WALK_INLINE void StoreLevel(int index) {
    if constexpr (L < kRegLevels) {
      if (index == L) {
EQX_QUANT_WALK_UNROLL
        for (int e = 0; e < kVec; ++e) level[L][e] = top[e];
        return;
      }
      StoreLevel<L + 1>(index);
    } else {
      float* slot = overflow + (index - kRegLevels) * kVec * overflow_stride;
EQX_QUANT_WALK_UNROLL
      for (int e = 0; e < kVec; ++e) slot[e * overflow_stride] = top[e];
    }
  }

  template <int L>
  EQX_QUANT_WALK_INLINE void AddLevelIntoTop(int index) {
    if constexpr (L < kRegLevels) {
      if (index == L) {
EQX_QUANT_WALK_UNROLL
        for (int e = 0; e < kVec; ++e) top[e] = AddF32(level[L][e], top[e]);
        return;
      }
      AddLevelIntoTop<L + 1>(index);
    } else {
      const float* slot =
          overflow + (index - kRegLevels) * kVec * overflow_stride;
EQX_QUANT_WALK_UNROLL
      for (int e = 0; e < kVec; ++e) {
        top[e] = AddF32(slot[e * overflow_stride], top[e]);
      }
    }
  }
};

}  // namespace dbias_walk

namespace cuda {

// Outcome of a launch sequence: ok, or the step that failed with its CUDA
// error code (cudaError_t as int) or, for a problem the kernels cannot take,
// invalid_argument with a message.
struct LaunchStatus {
  bool ok = true;
  bool invalid_argument = false;
  int cuda_error = 0;
  const char* what = "";
};

// Enqueues the whole op on `stream`: a tiny kernel that writes scale_inv and
// zeroes amax, then one main kernel (launched with programmatic dependent
// launch so that it overlaps the tiny one; it waits for it only before its
// amax atomics). Allocates nothing; every launch is checked.
LaunchStatus Fp8Quantize(const Fp8QuantizeProblem& problem,
                         const Fp8QuantizeBuffers& buffers,
                         CUstream_st* stream);

// x's MXFP8 rowwise blocks (1x32 along each row of cols, E8M0 scales),
// written by Fp8DbiasOnly in the same read as the dbias.
struct Mxfp8RowOutput {
  uint8_t* row = nullptr;        // batch x rows x cols FP8 bytes
  uint8_t* row_scale = nullptr;  // batch x rows x cols / 32 E8M0 bytes
  Fp8Format format = Fp8Format::kE4M3Fn;
};

// Whether Fp8DbiasOnly takes the MXFP8 rowwise output of x for `problem`
// (cols % 32 == 0, x 16-byte aligned, nodes short enough).
bool Fp8DbiasOnlyTakesMxfp8(const Fp8QuantizeProblem& problem, const void* x);

// The dbias of a dbias-only problem (with_dbias, neither FP8 output, one tree
// per example over at most one axis longer than 1: the MXFP8 op's dbias)
// into buffers.dbias (and buffers.dbias_cast): the column tree sums of the
// split's nodes, then the finish. scale, scale_inv and amax are neither read
// nor written. With `mx` (Fp8DbiasOnlyTakesMxfp8 must hold) also x's MXFP8
// rowwise blocks, in the same read.
LaunchStatus Fp8DbiasOnly(const Fp8QuantizeProblem& problem,
                          const Fp8QuantizeBuffers& buffers,
                          const Mxfp8RowOutput* mx, CUstream_st* stream);

// The finish of dbias node sums that another kernel wrote to buffers.dbias
// (split a power of two <= kMaxMxfp8DbiasSplit): node 0 of each tree := the
// tree over its nodes, and with dbias_cast node 0 in the input type. Nothing
// runs when there is nothing to finish.
LaunchStatus Fp8FinishDbias(const Fp8QuantizeProblem& problem,
                            const Fp8QuantizeBuffers& buffers,
                            CUstream_st* stream);

}  // namespace cuda
}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FP8_QUANTIZE_CUDA_H_
