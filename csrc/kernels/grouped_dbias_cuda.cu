// CUDA kernel of eqx_quant_grouped_dbias for sm_90a. Bit-exact with the CPU
// kernel (kernels/grouped_quantize_cpu.cc): dbias[g] = the canonical tree
// sum (common/tree_sum.h: split at ceil(n/2), IEEE f32 adds) of float(x) over
// the group's rows, +0 for an empty group, NaN written as 0x7FC00000.
//
// DbiasKernel (256 threads = 8 warps; CTA = (group g, 32 columns), one lane
// per column). The group's tree is cut at depth 3: warp w owns the node
// reached from the root by the path of w's 3 bits (MSB first), descending as
// the canonical tree splits (a node of one row has itself as left child and
// an empty right child, an empty node two empty children). Each lane sums
// its column over the node's rows in row order with the dense kernels'
// binary-counter walk (dbias_walk::DbiasStack + EndMerges from
// kernels/fp8_quantize_cuda.h: after leaf t, the EndMerges(count, t) nodes
// that end there are merged), 8 loads in flight, the first 6 partial sums in
// registers and the rest in shared memory. The 8 node sums (an empty node
// gives -0.0, the exact identity of IEEE addition: x + -0 == x for every x,
// +0 included) are then added pairwise up the 3 levels, left + right, which
// is the canonical tree exactly. The group offsets come from a block
// reduction of the group sizes (int64).
//
// Parallelism: G * ceil(N/32) CTAs of 8 row slices; a single huge group with
// few columns gets few CTAs (each warp then walks rows/8 rows).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "kernels/fp8_quantize_cuda.h"  // dbias_walk
#include "kernels/grouped_quantize_cuda.h"
#include "kernels/grouped_quantize_cuda_device.cuh"
#include "kernels/mxfp8_quantize_cuda_device.cuh"  // input types

namespace eqx_quant::cuda {
namespace {

using namespace grouped_dev;  // NOLINT: the shared helpers of the grouped ops
using mxfp8::Bf16In;
using mxfp8::F16In;
using mxfp8::F32In;

constexpr int kCols = 32;       // columns per CTA, one per lane
constexpr int kSliceDepth = 3;  // kWarps = 2^3 row slices
static_assert((1 << kSliceDepth) == kWarps, "one slice per warp");
constexpr int kRegLevels = 6;      // partial sums in registers
constexpr int kSharedLevels = 26;  // more in shared memory
constexpr int kMaxSliceDepth = kRegLevels + kSharedLevels;  // 2^32 rows
constexpr int kLoadAhead = 8;

struct DbiasParams {
  const void* x;
  const int32_t* group_sizes;
  float* dbias;  // batch x G x N
  int64_t batch;
  int64_t rows;  // R
  int64_t cols;  // N
  int64_t groups;
  RowSpec rs;          // R, U
  int64_t col_tiles;   // ceil(N / 32)
};

template <typename In>
__global__ void __launch_bounds__(kThreads)
    DbiasKernel(const __grid_constant__ DbiasParams p) {
  using Storage = typename In::Storage;
  __shared__ float overflow[kSharedLevels * kThreads];
  __shared__ float partial[kWarps][kCols];
  __shared__ int64_t warp_sums[kWarps];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t N = p.cols;
  const int64_t g = blockIdx.x;

  for (int64_t ex = blockIdx.z; ex < p.batch; ex += gridDim.z) {
    for (int64_t ct = blockIdx.y; ct < p.col_tiles; ct += gridDim.y) {
      const int64_t n = ct * kCols + lane;
      const bool valid = n < N;
      int64_t start;
      int64_t count;
      GroupSpan(p.group_sizes + ex * p.groups, g, p.rs, warp_sums, &start,
                &count);
      float* out = p.dbias + (ex * p.groups + g) * N;
      if (count == 0) {  // uniform
        if (warp == 0 && valid) out[n] = 0.0f;
        continue;
      }
      // This warp's node of the group's tree.
      int64_t begin = 0;
      int64_t size = count;
#pragma unroll
      for (int level = 0; level < kSliceDepth; ++level) {
        const bool right = ((warp >> (kSliceDepth - 1 - level)) & 1) != 0;
        if (size > 1) {
          const int64_t half = (size + 1) / 2;
          begin += right ? half : 0;
          size = right ? size - half : half;
        } else if (right) {
          size = 0;  // the empty right child of a one-row node
        }
      }
      float sum = -0.0f;
      if (size > 0) {  // uniform in the warp
        dbias_walk::DbiasStack<1, kRegLevels> stack;
        stack.overflow = overflow + threadIdx.x;
        stack.overflow_stride = kThreads;
        const Storage* src = static_cast<const Storage*>(p.x) +
                             ex * p.rows * N + (start + begin) * N +
                             (valid ? n : 0);
        for (int64_t r0 = 0; r0 < size; r0 += kLoadAhead) {
          float v[kLoadAhead];
#pragma unroll
          for (int k = 0; k < kLoadAhead; ++k) {
            v[k] = valid && r0 + k < size ? In::Scalar(src + (r0 + k) * N)
                                          : 0.0f;
          }
#pragma unroll
          for (int k = 0; k < kLoadAhead; ++k) {
            if (r0 + k < size) {
              const float leaf[1] = {v[k]};
              stack.Leaf(leaf, dbias_walk::EndMerges(size, r0 + k));
            }
          }
        }
        sum = stack.top[0];
      }
      partial[warp][lane] = sum;
      __syncthreads();
      if (warp == 0) {
        float s[kWarps];
#pragma unroll
        for (int w = 0; w < kWarps; ++w) s[w] = partial[w][lane];
#pragma unroll
        for (int width = kWarps; width > 1; width /= 2) {
#pragma unroll
          for (int i = 0; i < width / 2; ++i) {
            s[i] = __fadd_rn(s[2 * i], s[2 * i + 1]);
          }
        }
        if (valid) out[n] = s[0] != s[0] ? __uint_as_float(0x7FC00000u) : s[0];
      }
      __syncthreads();  // partial is free for the next tile
    }  // column tiles
  }  // examples
}

// DbiasVecKernel: the same tree cut (depth 3, warp w = node w) and the same
// walk, but each lane owns kV = 4 consecutive columns (one 8-byte load for
// bf16 / f16, 16 bytes for f32), so a CTA covers 128 columns, a warp reads
// 256 or 512 contiguous bytes per row, the walk's bookkeeping (EndMerges) is
// shared by 4 columns, and kVecAhead rows are loaded before they are added.
// Taken when N % 4 == 0, x is 16-byte aligned and a node's walk fits in
// kVecRegLevels + kVecSharedLevels partial sums.
constexpr int kV = 4;
constexpr int kVecCols = 32 * kV;
constexpr int kVecRegLevels = 6;
constexpr int kVecSharedLevels = 10;
constexpr int kVecMaxDepth = kVecRegLevels + kVecSharedLevels;
constexpr int kVecAhead = 16;

template <typename In>
__global__ void __launch_bounds__(kThreads)
    DbiasVecKernel(const __grid_constant__ DbiasParams p) {
  using Storage = typename In::Storage;
  __shared__ float overflow[kVecSharedLevels * kV * kThreads];
  __shared__ __align__(16) float partial[kWarps][kVecCols];
  __shared__ int64_t warp_sums[kWarps];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t N = p.cols;
  const int64_t g = blockIdx.x;

  for (int64_t ex = blockIdx.z; ex < p.batch; ex += gridDim.z) {
    for (int64_t ct = blockIdx.y; ct < p.col_tiles; ct += gridDim.y) {
      const int64_t n = ct * kVecCols + lane * kV;
      const bool valid = n < N;  // all kV columns (N % kV == 0)
      int64_t start;
      int64_t count;
      GroupSpan(p.group_sizes + ex * p.groups, g, p.rs, warp_sums, &start,
                &count);
      float* out = p.dbias + (ex * p.groups + g) * N;
      if (count == 0) {  // uniform
        if (warp == 0 && valid) {
#pragma unroll
          for (int e = 0; e < kV; ++e) out[n + e] = 0.0f;
        }
        continue;
      }
      int64_t begin = 0;
      int64_t size = count;
#pragma unroll
      for (int level = 0; level < kSliceDepth; ++level) {
        const bool right = ((warp >> (kSliceDepth - 1 - level)) & 1) != 0;
        if (size > 1) {
          const int64_t half = (size + 1) / 2;
          begin += right ? half : 0;
          size = right ? size - half : half;
        } else if (right) {
          size = 0;
        }
      }
      float sum[kV];
#pragma unroll
      for (int e = 0; e < kV; ++e) sum[e] = -0.0f;
      if (size > 0) {  // uniform in the warp
        dbias_walk::DbiasStack<kV, kVecRegLevels> stack;
        stack.overflow = overflow + threadIdx.x;
        stack.overflow_stride = kThreads;
        const Storage* src = static_cast<const Storage*>(p.x) +
                             ex * p.rows * N + (start + begin) * N +
                             (valid ? n : 0);
        for (int64_t r0 = 0; r0 < size; r0 += kVecAhead) {
          uint32_t w[kVecAhead][4];
#pragma unroll
          for (int k = 0; k < kVecAhead; ++k) {
            w[k][0] = w[k][1] = w[k][2] = w[k][3] = 0;
            if (valid && r0 + k < size) {
              const Storage* at = src + (r0 + k) * N;
              if constexpr (In::kKeysPerWord == 2) {
                const uint2 v = __ldg(reinterpret_cast<const uint2*>(at));
                w[k][0] = v.x;
                w[k][1] = v.y;
              } else {
                const uint4 v = __ldg(reinterpret_cast<const uint4*>(at));
                w[k][0] = v.x;
                w[k][1] = v.y;
                w[k][2] = v.z;
                w[k][3] = v.w;
              }
            }
          }
#pragma unroll
          for (int k = 0; k < kVecAhead; ++k) {
            if (r0 + k < size) {
              float leaf[kV];
#pragma unroll
              for (int e = 0; e < kV; ++e) leaf[e] = In::Element(w[k], e);
              stack.Leaf(leaf, dbias_walk::EndMerges(size, r0 + k));
            }
          }
        }
#pragma unroll
        for (int e = 0; e < kV; ++e) sum[e] = stack.top[e];
      }
      *reinterpret_cast<float4*>(&partial[warp][lane * kV]) =
          make_float4(sum[0], sum[1], sum[2], sum[3]);
      __syncthreads();
      if (warp == 0) {
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          float s[kWarps];
#pragma unroll
          for (int w = 0; w < kWarps; ++w) s[w] = partial[w][lane * kV + e];
#pragma unroll
          for (int width = kWarps; width > 1; width /= 2) {
#pragma unroll
            for (int i = 0; i < width / 2; ++i) {
              s[i] = __fadd_rn(s[2 * i], s[2 * i + 1]);
            }
          }
          if (valid) {
            out[n + e] = s[0] != s[0] ? __uint_as_float(0x7FC00000u) : s[0];
          }
        }
      }
      __syncthreads();  // partial is free for the next tile
    }  // column tiles
  }  // examples
}

template <typename In>
GroupedLaunchStatus LaunchDbiasVec(const DbiasParams& p, dim3 grid,
                                   cudaStream_t stream) {
  DbiasVecKernel<In><<<grid, kThreads, 0, stream>>>(p);
  return CheckLaunch("launching the grouped DbiasVecKernel");
}

template <typename In>
GroupedLaunchStatus LaunchDbias(const DbiasParams& p, dim3 grid,
                                cudaStream_t stream) {
  DbiasKernel<In><<<grid, kThreads, 0, stream>>>(p);
  return CheckLaunch("launching the grouped DbiasKernel");
}

}  // namespace

GroupedLaunchStatus GroupedDbias(const GroupedDbiasProblem& problem,
                                 const GroupedDbiasBuffers& buffers,
                                 CUstream_st* stream) {
  const GroupedView& v = problem.view;
  if (v.batch == 0 || v.cols == 0) return GroupedLaunchStatus{};
  // A warp's node has at most ceil(R / 8) rows; its walk keeps at most
  // ceil(log2(rows)) partial sums.
  const int64_t slice_rows = grouped::CeilDiv(v.rows, int64_t{kWarps});
  if (dbias_walk::CeilLog2(slice_rows) > kMaxSliceDepth) {
    return Unsupported("too many rows (more than 2^35)");
  }
  DbiasParams p{};
  p.x = buffers.x;
  p.group_sizes = buffers.group_sizes;
  p.dbias = buffers.dbias;
  p.batch = v.batch;
  p.rows = v.rows;
  p.cols = v.cols;
  p.groups = v.groups;
  p.rs = RowSpec::Make(v.rows, v.rows_per_unit);
  p.col_tiles = grouped::CeilDiv(v.cols, int64_t{kCols});
  if (v.groups > int64_t{0x7FFFFFFF}) {
    return Unsupported("too many groups (2^31 or more)");
  }
  const bool vec =
      v.cols % kV == 0 &&
      reinterpret_cast<uintptr_t>(buffers.x) % 16 == 0 &&
      dbias_walk::CeilLog2(slice_rows) <= kVecMaxDepth;
  if (vec) {
    DbiasParams q = p;
    q.col_tiles = grouped::CeilDiv(v.cols, int64_t{kVecCols});
    const dim3 grid(
        static_cast<unsigned>(v.groups),
        static_cast<unsigned>(std::min<int64_t>(q.col_tiles, 65535)),
        static_cast<unsigned>(std::min<int64_t>(v.batch, 65535)));
    switch (v.input_type) {
      case InputType::kF32:
        return LaunchDbiasVec<F32In>(q, grid, stream);
      case InputType::kF16:
        return LaunchDbiasVec<F16In>(q, grid, stream);
      case InputType::kBF16:
        return LaunchDbiasVec<Bf16In>(q, grid, stream);
    }
    return Unsupported("unknown input type");
  }
  // (groups, column tiles, examples); y and z stride beyond 65535.
  const dim3 grid(static_cast<unsigned>(v.groups),
                  static_cast<unsigned>(std::min<int64_t>(p.col_tiles, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(v.batch, 65535)));
  switch (v.input_type) {
    case InputType::kF32:
      return LaunchDbias<F32In>(p, grid, stream);
    case InputType::kF16:
      return LaunchDbias<F16In>(p, grid, stream);
    case InputType::kBF16:
      return LaunchDbias<Bf16In>(p, grid, stream);
  }
  return Unsupported("unknown input type");
}

}  // namespace eqx_quant::cuda
