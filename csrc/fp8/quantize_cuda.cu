// CUDA kernels of eqx_quant_fp8_quantize for sm_90a (H100 / H200).
//
// Semantics: exactly the CPU kernel's (fp8/quantize_cpu.h), bit for
// bit. Per example b: y = float(x) * scale[b] (one IEEE f32 multiply,
// __fmul_rn; this file is compiled without fast-math, FTZ or FMA
// contraction), a saturating round-to-nearest-even cast to e4m3fn / e5m2 with
// NaN -> 0x7F, scale_inv[b] = 1 / scale[b] (IEEE, NaN canonical), amax[b] =
// max |x| ignoring NaN (subnormals kept), dbias = canonical tree sums, one per
// node of the split axis' tree, node 0 then replaced by the tree over all of
// them (NaN canonical).
//
// The FP8 cast is the hardware convert `cvt.rn.satfinite.{e4m3,e5m2}x2.f32`
// (two values per instruction, SASS F2FP.SATFINITE). Its results equal
// fp8_format.h's FloatToFp8 for every f32 input, NaN -> 0x7F of either sign
// and the sign of zero included; EqxQuantCudaFp8ConvertSelfTest
// (cuda/fp8_convert_self_test.cu) checks that on all 2^32 f32 bit patterns
// (tests/cuda/test_cuda_fp8.py runs it).
//
// Launch sequence (all on the caller's stream, nothing allocated, every launch
// checked); the kernels live in four files:
//   1. InitKernel: scale_inv[b] = 1/scale[b], amax[b] = 0. It lets its
//      dependents launch at once.
//   2. Delayed scaling (a given scale): one main kernel, launched with
//      programmatic dependent launch so that it overlaps (1); a block waits
//      for (1) (griddepcontrol.wait) only right before its single amax
//      atomicMax. EQX_QUANT_CUDA_PDL=0 turns PDL off.
//        * CastRowwiseKernel (this file) when only the rowwise cast is
//          wanted: a flat, vectorised stream over each example: 16-byte loads
//          (kCastUnroll in flight per thread), 8-byte (bf16/f16) or 4-byte
//          (f32) streaming stores, block max + one atomicMax per block; 256
//          threads, 32 registers, one CTA per chunk of 4 vectors per thread.
//        * CastTransposeKernel (fp8/transpose_cuda.cu) for the rowwise +
//          transposed copies without dbias of aligned shapes (rows % 16,
//          whole 16-byte vectors): 128 x 128 tiles staged in shared memory
//          (CastTransposeTileKernel when rows and columns are multiples of
//          128: one whole tile per block, 128 x 256 where the columns allow,
//          no bounds tests);
//        * the walk (fp8/walk_cuda.cu) otherwise: transposed output and/or
//          dbias, tiles of 64 x kVec columns walked down a range of rows.
//   3. Current scaling (scale_from_amax: the scale is computed from the amax
//      of x on the device, scale[b] only being the fallback):
//        * a rowwise-only single example (aligned, whole 16-byte vectors):
//          CurrentCastKernel (fp8/current_cuda.cu), one cooperative launch
//          after (1): amax, grid-wide sync, scale, cast, keeping part of x in
//          shared memory and re-reading the rest in reverse order (L2 hits);
//        * a single example with the transposed copy, no dbias, aligned
//          (TransposeApplies): CastTransposeKernel<kFusedAmax>, one
//          cooperative launch after (1): its amax pass (the block's tiles
//          last first, the first ones kept in L2), grid-wide sync, scale,
//          cast + transpose (CurrentTransposeTileKernel for whole tiles);
//          where rows % 128 == 0 and x has two 128-row sub-tiles per SM,
//          DbiasCurrentCastKernel<!kDbias> instead (below, without the sums);
//        * with dbias of a single example over one reduced axis whose nodes
//          are 2^k >= 4 rows (rows % 128 == 0), rowwise and/or transposed:
//          DbiasCurrentCastKernel (fp8/dbias_current_cuda.cu), one
//          cooperative launch after (1): node sums and amax in one read,
//          grid-wide sync, node 0 finished, scale, cast (as above; the
//          transposed copy through a staging tile);
//        * otherwise with dbias over one reduced axis: the dbias node sums and the
//          amax in one pass (LaunchColumnTreeSums: the grouped dbias kernel
//          over equal chunks of rows), then the main kernel of (2) without
//          dbias, which derives the scale from the finished amax;
//        * dbias alone (no FP8 output: the block formats' quantize_dbias)
//          over one reduced axis: that one pass only; else the walk with no
//          output;
//        * otherwise the amax kernel (CastRowwiseKernel without the cast),
//          then the main kernel of (2), which waits for it, derives the scale
//          from the finished amax and writes scale_inv.
//   4. With dbias split into several nodes (dbias_split > 1):
//      FinishDbiasNodesKernel sums each split's nodes into its node 0 (so
//      XLA does not finish the tree in one small kernel per level), and with
//      dbias_cast writes node 0 in the input type too (also with one node:
//      then it is only that cast). DbiasCurrentCastKernel does both itself.
// No kernel spills (ptxas -warn-spills is on in CMake).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/float_narrow.h"
#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "common/mxfp8_problem.h"  // kMaxMxfp8DbiasSplit
#include "fp8/device_cuda.cuh"
#include "fp8/launch_cuda.h"
#include "fp8/quantize_cuda.h"
#include "grouped/column_tree_sums_cuda.h"

namespace eqx_quant::cuda {
namespace fp8 {
namespace {

// ---------------------------------------------------------------------------
// Tuning constants.

// CastRowwiseKernel.
constexpr int kCastThreads = 256;
constexpr int kCastUnroll = 4;  // 16-byte loads in flight per thread
constexpr int kCastBlocksPerSm = 8;  // resident per SM: 32 registers, full occupancy


// ---------------------------------------------------------------------------
// 1. scale_inv and the amax zeroing.

__global__ void InitKernel(const float* __restrict__ scale,
                           float* __restrict__ scale_inv,
                           float* __restrict__ amax, int64_t batch) {
  AllowDependentGrids();
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       b < batch; b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    scale_inv[b] = CanonicalNan(__frcp_rn(scale[b]));
    amax[b] = 0.0f;
  }
}

// ---------------------------------------------------------------------------
// 2a. Rowwise cast + amax (kCast), or the amax alone (current scaling's first
// pass).

struct CastParams {
  const void* x;
  const float* scale;
  uint8_t* row;
  float* scale_inv;
  float* amax;
  int64_t batch;
  int64_t elements;      // per example
  bool aligned;          // x and row 16-byte aligned
  bool scale_from_amax;  // the amax kernel has run: scale from amax
};

template <typename In, Fp8Format kFormat, bool kCast>
__global__ void __launch_bounds__(kCastThreads, kCastBlocksPerSm)
    CastRowwiseKernel(const __grid_constant__ CastParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;
  constexpr int64_t kBlockVectors = int64_t{kCastThreads} * kCastUnroll;
  __shared__ float warp_max[kCastThreads / 32];
  const int tid = threadIdx.x;
  const int64_t count = p.elements;

  for (int64_t b = blockIdx.y; b < p.batch; b += gridDim.y) {
    float scale = 0.0f;
    if constexpr (kCast) {
      scale = ExampleScale<kFormat>(p.scale, p.amax, p.scale_from_amax, b);
      if (p.scale_from_amax && blockIdx.x == 0 && tid == 0) {
        p.scale_inv[b] = ScaleInverse(scale);
      }
    }
    const Storage* x = static_cast<const Storage*>(p.x) + b * count;
    uint8_t* out = kCast ? p.row + b * count : nullptr;
    // Elements before the first 16-byte boundary, and after the last.
    int64_t head = p.aligned ? (kVec - (b * count) % kVec) % kVec : count;
    head = head < count ? head : count;
    const int64_t vectors = (count - head) / kVec;
    const int64_t tail = head + vectors * kVec;
    float amax = 0.0f;

    const int64_t scalars = head + (count - tail);
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kCastThreads + tid;
         i < scalars; i += static_cast<int64_t>(gridDim.x) * kCastThreads) {
      const int64_t e = i < head ? i : tail + (i - head);
      const float v = In::Scalar(x + e);
      amax = fmaxf(amax, fabsf(v));
      if constexpr (kCast) out[e] = CastOne<kFormat>(v, scale);
    }

    const Storage* xv = x + head;
    uint8_t* ov = out + (kCast ? head : 0);
    for (int64_t base = static_cast<int64_t>(blockIdx.x) * kBlockVectors;
         base < vectors; base += static_cast<int64_t>(gridDim.x) * kBlockVectors) {
      uint4 raw[kCastUnroll];
#pragma unroll
      for (int u = 0; u < kCastUnroll; ++u) {
        const int64_t i = base + u * kCastThreads + tid;
        if (i < vectors) raw[u] = LoadStreaming(xv + i * kVec);
      }
      uint8_t* const o = kCast ? ov + (base + tid) * kVec : nullptr;
#pragma unroll
      for (int u = 0; u < kCastUnroll; ++u) {
        const int64_t i = base + u * kCastThreads + tid;
        if (i < vectors) {
          float v[kVec];
          In::Unpack(raw[u], v);
#pragma unroll
          for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(v[e]));
          if constexpr (kCast) {
            uint32_t q[kVec / 4];
            CastVec<kFormat>(v, scale, q);
            StoreCastWords(o + u * kCastThreads * kVec, q);
          }
        }
      }
    }

    amax = BlockMax<kCastThreads>(amax, warp_max);
    if (tid == 0) {
      if (!kCast) {
        // The cast kernel after this one waits for this grid only: this
        // grid must not finish before InitKernel's zeroing has.
        WaitForPrerequisiteGrids();
      }
      if (!p.scale_from_amax || !kCast) PublishAmax(p.amax + b, amax);
    }
    __syncthreads();  // warp_max is reused by the next example
  }
}

template <typename In, Fp8Format kFormat, bool kCast>
LaunchStatus LaunchCast(const Fp8QuantizeProblem& problem,
                        const Fp8QuantizeBuffers& buffers,
                        cudaStream_t stream) {
  CastParams p;
  p.x = buffers.x;
  p.scale = buffers.scale;
  p.row = kCast ? buffers.row : nullptr;
  p.scale_inv = buffers.scale_inv;
  p.amax = buffers.amax;
  p.batch = problem.batch;
  p.elements = problem.rows * problem.cols;
  p.aligned = Aligned16(buffers.x) && (!kCast || Aligned16(buffers.row));
  p.scale_from_amax = problem.scale_from_amax;
  const int64_t grid_y = std::min<int64_t>(problem.batch, 65535);
  const int64_t vectors = p.elements / In::kVec + 1;
  const int64_t useful =
      (vectors + int64_t{kCastThreads} * kCastUnroll - 1) /
      (int64_t{kCastThreads} * kCastUnroll);
  // One CTA per chunk of kCastThreads x kCastUnroll vectors (the
  // grid-stride loop then runs once): a grid of short CTAs streams faster
  // than one persistent wave (benchmarks/probes/stream_cast.cu).
  const int64_t grid_x =
      std::max<int64_t>(1, std::min<int64_t>(useful, 0x7FFFFFFF));
  const cudaError_t error =
      Launch(&CastRowwiseKernel<In, kFormat, kCast>,
             dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)),
             dim3(kCastThreads), 0, stream, 1, p);
  if (error != cudaSuccess) {
    return Failed(error, kCast ? "launching CastRowwiseKernel"
                               : "launching the amax kernel");
  }
  return LaunchStatus{};
}

// ---------------------------------------------------------------------------
// 2c. dbias over one reduced axis (TreeSumsFit, at the end of this file): the
// dbias node sums (equal chunks of rows: dbias_split divides the axis) and the
// amax in one pass (grouped/column_tree_sums_cuda.h); with current scaling
// and an FP8 output (TreeSumsApply), then the cast without dbias.


ColumnTreeSums TreeSumsOf(const Fp8QuantizeProblem& problem,
                          const Fp8QuantizeBuffers& buffers) {
  ColumnTreeSums sums;
  sums.x = buffers.x;
  sums.input_type = problem.input_type;
  sums.batch = problem.batch;
  sums.rows = problem.rows;
  sums.cols = problem.cols;
  sums.nodes = problem.dbias_split;
  sums.sums = buffers.dbias;
  sums.amax = buffers.amax;
  return sums;
}

// mx: null, or the MXFP8 rowwise output written in the same read.
LaunchStatus LaunchTreeSums(const Fp8QuantizeProblem& problem,
                            const Fp8QuantizeBuffers& buffers,
                            cudaStream_t stream,
                            const Mxfp8RowOutput* mx = nullptr) {
  ColumnTreeSums sums = TreeSumsOf(problem, buffers);
  if (mx != nullptr) {
    sums.mx_row = mx->row;
    sums.mx_row_scale = mx->row_scale;
    sums.mx_format = mx->format;
  }
  const GroupedLaunchStatus status = LaunchColumnTreeSums(sums, stream);
  if (status.ok) return LaunchStatus{};
  if (status.cuda_error != 0) {
    return Failed(static_cast<cudaError_t>(status.cuda_error), status.what);
  }
  return Invalid(status.what);
}

// ---------------------------------------------------------------------------
// 4. Node 0 of each dbias split := the tree over its `split` node sums (a
// power of two: <= kMaxDbiasSplit for the FP8 op, <= kMaxMxfp8DbiasSplit for
// the MXFP8 op's 32-row nodes, so a perfect pairwise tree), which is the
// split axis' whole tree; the other nodes are left as they are. With `cast`
// (not null), node 0 also goes there in the input type. A block takes 32
// columns of one (example, kept row): warp w sums the kPer = split / kSlices
// consecutive nodes of slice w (a perfect subtree: up to 8 loads in flight at
// once, more in chunks of 8 whose sums merge by a binary counter), and warp 0
// sums the kSlices slice sums. Up to 128 nodes, 8 slices; the MXFP8 op's
// 256 to 1024 32-row nodes, 32 slices, so that a warp does not wait on many
// chunks of loads one after the other.

constexpr int kFinishMaxSlices = 8;
constexpr int kFinishWideSlices = 32;  // for split >= 256

// The perfect pairwise tree over nodes[0], nodes[cols], ... (kPer of them).
template <int kPer>
__device__ __forceinline__ float SliceTree(const float* nodes, int64_t cols) {
  constexpr int kChunk = kPer < 8 ? kPer : 8;
  constexpr int kChunks = kPer / kChunk;
  constexpr int kDepth = kChunks == 1 ? 0 : kChunks == 2 ? 1 : kChunks == 4 ? 2
                         : kChunks == 8 ? 3 : 4;
  static_assert((1 << kDepth) == kChunks, "kPer / 8 is a power of two <= 16");
  float stack[kDepth + 1];
#pragma unroll
  for (int q = 0; q < kChunks; ++q) {
    float v[kChunk];
#pragma unroll
    for (int u = 0; u < kChunk; ++u) v[u] = nodes[(q * kChunk + u) * cols];
    PairwiseTree<kChunk>(v);
    float sum = v[0];
    int level = 0;
#pragma unroll
    for (int t = q; (t & 1) != 0; t >>= 1, ++level) {
      sum = __fadd_rn(stack[level], sum);
    }
    stack[level] = sum;
  }
  return stack[kDepth];
}

template <int kSlices, int kPer>
__global__ void __launch_bounds__(32 * kSlices)
    FinishDbiasNodesKernel(float* __restrict__ dbias, void* __restrict__ cast,
                           InputType type, int64_t trees, int64_t cols) {
  constexpr int64_t kSplit = int64_t{kSlices} * kPer;
  __shared__ float slice_sums[kSlices][32];
  const int slice = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t col_chunks = (cols + 31) / 32;
  for (int64_t work = blockIdx.x; work < trees * col_chunks; work += gridDim.x) {
    const int64_t col = (work % col_chunks) * 32 + lane;
    float* const nodes = dbias + (work / col_chunks) * kSplit * cols + col;
    if (col < cols) {
      slice_sums[slice][lane] = SliceTree<kPer>(nodes + slice * kPer * cols, cols);
    }
    __syncthreads();
    if (slice == 0 && col < cols) {
      float v[kSlices];
#pragma unroll
      for (int w = 0; w < kSlices; ++w) v[w] = slice_sums[w][lane];
      PairwiseTree<kSlices>(v);
      const float total = CanonicalNan(v[0]);
      nodes[0] = total;
      if (cast != nullptr) {
        StoreNarrowed(type, cast, (work / col_chunks) * cols + col, total);
      }
    }
    __syncthreads();  // the slice sums are read before the next work item
  }
}

bool FinishDbiasApplies(const Fp8QuantizeProblem& problem) {
  return problem.with_dbias &&
         (problem.dbias_split > 1 || problem.dbias_cast) && problem.cols > 0 &&
         problem.batch * problem.dbias_kept_rows > 0;
}

template <int kSlices, int kPer>
LaunchStatus LaunchFinishSlices(const Fp8QuantizeProblem& problem,
                                const Fp8QuantizeBuffers& buffers,
                                cudaStream_t stream, int sms) {
  const int64_t trees = problem.batch * problem.dbias_kept_rows;
  const int64_t work = trees * ((problem.cols + 31) / 32);
  const int64_t blocks = std::min<int64_t>(work, int64_t{sms} * 16);
  FinishDbiasNodesKernel<kSlices, kPer>
      <<<static_cast<unsigned>(blocks), 32 * kSlices, 0, stream>>>(
          buffers.dbias, problem.dbias_cast ? buffers.dbias_cast : nullptr,
          problem.input_type, trees, problem.cols);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    return Failed(error, "launching FinishDbiasNodesKernel");
  }
  return LaunchStatus{};
}

// split is a power of two <= kMaxMxfp8DbiasSplit (the FFI layer checks it).
LaunchStatus LaunchFinishDbias(const Fp8QuantizeProblem& problem,
                               const Fp8QuantizeBuffers& buffers,
                               cudaStream_t stream, int sms) {
  static_assert(kMaxDbiasSplit == 8 * kFinishMaxSlices, "one case per split");
  static_assert(kMaxMxfp8DbiasSplit == 32 * kFinishWideSlices, "cases to 1024");
  switch (problem.dbias_split) {
    case 1:  // only the cast
      return LaunchFinishSlices<1, 1>(problem, buffers, stream, sms);
    case 2:
      return LaunchFinishSlices<2, 1>(problem, buffers, stream, sms);
    case 4:
      return LaunchFinishSlices<4, 1>(problem, buffers, stream, sms);
    case 8:
      return LaunchFinishSlices<8, 1>(problem, buffers, stream, sms);
    case 16:
      return LaunchFinishSlices<8, 2>(problem, buffers, stream, sms);
    case 32:
      return LaunchFinishSlices<8, 4>(problem, buffers, stream, sms);
    case 64:
      return LaunchFinishSlices<8, 8>(problem, buffers, stream, sms);
    case 128:
      return LaunchFinishSlices<8, 16>(problem, buffers, stream, sms);
    case 256:
      return LaunchFinishSlices<kFinishWideSlices, 8>(problem, buffers, stream,
                                                      sms);
    case 512:
      return LaunchFinishSlices<kFinishWideSlices, 16>(problem, buffers, stream,
                                                       sms);
    case 1024:
      return LaunchFinishSlices<kFinishWideSlices, 32>(problem, buffers, stream,
                                                       sms);
  }
  return Invalid("dbias_split must be a power of two <= 1024");
}

// ---------------------------------------------------------------------------
// The kernels of (2) and (3): the cast, the amax, the dbias node sums.
LaunchStatus LaunchMain(const Fp8QuantizeProblem& problem,
                        const Fp8QuantizeBuffers& buffers, cudaStream_t stream,
                        int sms) {
  const int64_t elements = problem.rows * problem.cols;
  if (!problem.rowwise && !problem.colwise && TreeSumsFit(problem)) {
    return LaunchTreeSums(problem, buffers, stream);  // dbias only
  }
  return DispatchTypes(problem, [&](auto input, auto format) {
    using In = decltype(input);
    constexpr Fp8Format kFormat = decltype(format)::value;
    if (TreeSumsApply(problem)) {
      const LaunchStatus sums = LaunchTreeSums(problem, buffers, stream);
      if (!sums.ok) return sums;
      Fp8QuantizeProblem cast = problem;  // the cast after the amax is known
      cast.with_dbias = false;
      if (TransposeApplies(cast, buffers)) {
        return LaunchTranspose(cast, buffers, stream, sms);
      }
      if (cast.colwise) return LaunchWalk(cast, buffers, stream, sms);
      return LaunchCast<In, kFormat, true>(cast, buffers, stream);
    }
    if (problem.scale_from_amax && elements > 0) {
      const LaunchStatus amax =
          LaunchCast<In, kFormat, false>(problem, buffers, stream);
      if (!amax.ok) return amax;
    }
    if (TransposeApplies(problem, buffers)) {
      return LaunchTranspose(problem, buffers, stream, sms);
    }
    if (problem.with_dbias || problem.colwise) {
      return LaunchWalk(problem, buffers, stream, sms);
    }
    return LaunchCast<In, kFormat, true>(problem, buffers, stream);
  });
}

}  // namespace

bool TreeSumsFit(const Fp8QuantizeProblem& problem) {
  int64_t long_axes = 0;
  for (int64_t d : problem.dbias_reduced_dims) long_axes += d > 1 ? 1 : 0;
  return problem.with_dbias && problem.dbias_kept_rows == 1 &&
         long_axes <= 1 && problem.rows > 0 && problem.cols > 0 &&
         problem.dbias_split > 0 && problem.rows % problem.dbias_split == 0;
}

bool TreeSumsApply(const Fp8QuantizeProblem& problem) {
  return problem.scale_from_amax && (problem.rowwise || problem.colwise) &&
         TreeSumsFit(problem);
}

}  // namespace fp8

bool Fp8DbiasOnlyTakesMxfp8(const Fp8QuantizeProblem& problem, const void* x) {
  Fp8QuantizeBuffers buffers;
  buffers.x = x;
  return fp8::TreeSumsFit(problem) &&
         ColumnTreeSumsTakeMxfp8(fp8::TreeSumsOf(problem, buffers));
}

LaunchStatus Fp8FinishDbias(const Fp8QuantizeProblem& problem,
                            const Fp8QuantizeBuffers& buffers,
                            CUstream_st* stream) {
  if (!fp8::FinishDbiasApplies(problem)) return LaunchStatus{};
  return fp8::LaunchFinishDbias(problem, buffers, stream, SmCount());
}

LaunchStatus Fp8DbiasOnly(const Fp8QuantizeProblem& problem,
                          const Fp8QuantizeBuffers& buffers,
                          const Mxfp8RowOutput* mx, CUstream_st* stream) {
  using namespace fp8;
  if (problem.rowwise || problem.colwise || !problem.with_dbias) {
    return Invalid("Fp8DbiasOnly takes a dbias-only problem");
  }
  if (problem.batch <= 0 || problem.cols <= 0 ||
      problem.dbias_kept_rows <= 0) {
    return LaunchStatus{};
  }
  if (problem.rows > 0) {
    if (!TreeSumsFit(problem)) {
      return Invalid("Fp8DbiasOnly takes one tree per example over one axis");
    }
    Fp8QuantizeBuffers sums = buffers;
    sums.amax = nullptr;  // no amax
    const LaunchStatus status = LaunchTreeSums(problem, sums, stream, mx);
    if (!status.ok) return status;
  } else {
    // No rows: every node sum is +0 (the tree over nothing).
    const cudaError_t error = cudaMemsetAsync(
        buffers.dbias, 0,
        sizeof(float) * problem.batch * problem.dbias_kept_rows *
            problem.dbias_split * problem.cols,
        stream);
    if (error != cudaSuccess) return Failed(error, "zeroing dbias");
  }
  if (!FinishDbiasApplies(problem)) return LaunchStatus{};
  return LaunchFinishDbias(problem, buffers, stream, SmCount());
}

LaunchStatus Fp8Quantize(const Fp8QuantizeProblem& problem,
                         const Fp8QuantizeBuffers& buffers,
                         CUstream_st* stream) {
  using namespace fp8;
  if (problem.batch <= 0) return LaunchStatus{};
  const int sms = SmCount();

  const int64_t init_blocks =
      std::min<int64_t>((problem.batch + 255) / 256, 1024);
  InitKernel<<<static_cast<unsigned>(init_blocks), 256, 0, stream>>>(
      buffers.scale, buffers.scale_inv, buffers.amax, problem.batch);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return Failed(error, "launching InitKernel");

  const int64_t elements = problem.rows * problem.cols;
  const int64_t dbias_elements =
      problem.with_dbias
          ? problem.dbias_kept_rows * problem.dbias_split * problem.cols
          : 0;
  // Nothing to read: amax 0, so even a current scale is the fallback that
  // InitKernel inverted.
  if (elements == 0 && dbias_elements == 0) return LaunchStatus{};

  if (CurrentCastApplies(problem, buffers)) {
    return LaunchCurrentCast(problem, buffers, stream, sms);
  }
  if (DbiasCurrentCastApplies(problem, buffers)) {
    return LaunchDbiasCurrentCast(problem, buffers, stream, sms);
  }
  if (CurrentTransposeApplies(problem, buffers)) {
    return LaunchCurrentTranspose(problem, buffers, stream, sms);
  }
  const LaunchStatus main = LaunchMain(problem, buffers, stream, sms);
  if (!main.ok || !FinishDbiasApplies(problem)) return main;
  return LaunchFinishDbias(problem, buffers, stream, sms);
}

}  // namespace eqx_quant::cuda
