// Current scaling of a rowwise-only example in one cooperative launch
// (sm_90a): amax, grid-wide sync, scale, cast. The float semantics are those
// of fp8/quantize_cuda.cu (bit-identical to the CPU kernel).
//
// One block of kThreads per SM. The example's 16-byte input vectors are cut
// into tiles of kThreads x kUnroll vectors (64 KiB with kUnroll 4, 16 KiB with
// 1), dealt round robin: block b owns tiles b, b + grid, b + 2 grid, ... (so
// at any moment the SMs stream neighbouring addresses, never 132 far-apart
// ones). kUnroll is 1 where 64 KiB tiles would leave over half the SMs
// without one (up to ~4.3 MB of x on an H200).
//   Phase 1 reads the block's tiles in increasing order, two tiles (8 loads
//   per thread) in flight, for the block max; its first kKeptTiles tiles are
//   also stored in shared memory (192 KiB per SM, ~25 MB on an H200). One
//   atomicMax per block, then a grid-wide sync.
//   Phase 2: every block derives the same scale from the finished amax
//   (ScaleFromAmax, one IEEE division), block 0 writes scale_inv, and the
//   tiles are cast in decreasing order: the most recently read first (still in
//   L2), the kept ones last (from shared memory). Only the rest of x is read
//   from DRAM a second time, which two plain passes cannot avoid: at 4096^2
//   bf16 (32 MiB) nothing is. L2 eviction priorities: a block's last tiles
//   (about 60% of the L2 over all blocks) evict_last in phase 1, all other
//   reads evict_first; the FP8 bytes go out with streaming stores.
// InitKernel (zeroed amax) runs before this launch in plain stream order.

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "fp8/device_cuda.cuh"
#include "fp8/launch_cuda.h"
#include "fp8/quantize_cuda.h"

namespace eqx_quant::cuda::fp8 {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kKeptTiles = 3;
constexpr int kLargeUnroll = 4;  // 16-byte loads per thread per tile
constexpr int kSmallUnroll = 1;  // the same where large tiles leave SMs idle

template <int kUnroll>
constexpr int64_t kTileVectors = int64_t{kThreads} * kUnroll;

struct CurrentCastParams {
  const void* x;
  const float* fallback;  // the scale for an amax that is 0, NaN or Inf
  uint8_t* row;
  float* scale_inv;
  float* amax;            // zeroed by InitKernel
  int64_t vectors;        // 16-byte input vectors (the example, exactly)
  int64_t tiles;          // ceil(vectors / tile vectors)
  int64_t l2_tiles;       // a block's last tiles read with L2 evict_last
  bool hints;             // L2 eviction priorities (else evict_normal)
};

// Loads tile t's vectors of this thread (zero past the end).
template <int kUnroll>
__device__ __forceinline__ void LoadTile(const uint4* x, int64_t t,
                                         int64_t vectors, uint64_t policy,
                                         uint4 (&raw)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = t * kTileVectors<kUnroll> + u * kThreads + threadIdx.x;
    raw[u] = i < vectors ? LoadStreaming(x + i, policy)
                         : make_uint4(0u, 0u, 0u, 0u);
  }
}

// Tile t (the block's k-th) from shared memory if kept, else from x.
template <int kUnroll>
__device__ __forceinline__ void FetchTile(const uint4* x, const uint4* kept,
                                          int64_t k, int64_t t,
                                          int64_t vectors, uint64_t policy,
                                          uint4 (&raw)[kUnroll]) {
  if (k < kKeptTiles) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      raw[u] = kept[k * kTileVectors<kUnroll> + u * kThreads + threadIdx.x];
    }
  } else {
    LoadTile(x, t, vectors, policy, raw);
  }
}

// Casts this thread's vectors of tile t into row (streaming stores).
template <typename In, Fp8Format kFormat, int kUnroll>
__device__ __forceinline__ void CastTile(const uint4 (&raw)[kUnroll],
                                         int64_t t, int64_t vectors,
                                         float scale, uint8_t* row) {
  constexpr int kVec = In::kVec;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = t * kTileVectors<kUnroll> + u * kThreads + threadIdx.x;
    if (i < vectors) {
      float v[kVec];
      In::Unpack(raw[u], v);
      uint32_t q[kVec / 4];
      CastVec<kFormat>(v, scale, q);
      StoreCastWords(row + i * kVec, q);
    }
  }
}

template <typename In, Fp8Format kFormat, int kUnroll>
__global__ void __launch_bounds__(kThreads, 1)
    CurrentCastKernel(const __grid_constant__ CurrentCastParams p) {
  extern __shared__ __align__(16) uint4 kept[];
  __shared__ float warp_max[kThreads / 32];
  const int tid = threadIdx.x;
  const uint4* x = static_cast<const uint4*>(p.x);
  // This block's tiles: t_k = blockIdx.x + k * gridDim.x, k < count.
  const int64_t count =
      (p.tiles - blockIdx.x + gridDim.x - 1) / gridDim.x;
  auto tile = [&](int64_t k) { return blockIdx.x + k * gridDim.x; };
  // L2: the tiles phase 2 re-reads first are kept over the others, and over
  // the FP8 output.
  const uint64_t keep_policy = L2Policy(p.hints, /*keep=*/true);
  const uint64_t drop_policy = L2Policy(p.hints, /*keep=*/false);
  auto policy = [&](int64_t k) {
    return k >= kKeptTiles && k >= count - p.l2_tiles ? keep_policy
                                                       : drop_policy;
  };

  // Phase 1: the block max, keeping the first kKeptTiles tiles.
  float amax = 0.0f;
  for (int64_t k = 0; k < count; k += 2) {
    uint4 a[kUnroll];
    uint4 b[kUnroll];
    LoadTile(x, tile(k), p.vectors, policy(k), a);
    const bool second = k + 1 < count;
    if (second) LoadTile(x, tile(k + 1), p.vectors, policy(k + 1), b);
    amax = FoldAbsMax<In>(a, amax);
    if (second) amax = FoldAbsMax<In>(b, amax);
    if (k < kKeptTiles) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        kept[k * kTileVectors<kUnroll> + u * kThreads + tid] = a[u];
        if (second && k + 1 < kKeptTiles) {
          kept[(k + 1) * kTileVectors<kUnroll> + u * kThreads + tid] = b[u];
        }
      }
    }
  }
  amax = BlockMax<kThreads>(amax, warp_max);
  if (tid == 0 && amax > 0.0f) {
    atomicMax(reinterpret_cast<unsigned int*>(p.amax), __float_as_uint(amax));
  }
  cg::this_grid().sync();

  // Phase 2: the scale of the finished amax, then the cast, last tiles first,
  // two tiles (8 vectors per thread) in flight for 16-bit inputs (f32: one,
  // which keeps it within the 64 registers of 1024 threads).
  constexpr int64_t kPerStep = In::kVec == 8 ? 2 : 1;
  const float scale = ScaleFromAmax(__ldcg(p.amax), *p.fallback, kFormat);
  if (blockIdx.x == 0 && tid == 0) *p.scale_inv = ScaleInverse(scale);
  for (int64_t k = count - 1; k >= 0; k -= kPerStep) {
    uint4 a[kUnroll];
    uint4 b[kUnroll];
    FetchTile(x, kept, k, tile(k), p.vectors, drop_policy, a);
    const bool second = kPerStep == 2 && k >= 1;
    if (second) {
      FetchTile(x, kept, k - 1, tile(k - 1), p.vectors, drop_policy, b);
    }
    CastTile<In, kFormat, kUnroll>(a, tile(k), p.vectors, scale, p.row);
    if (second) {
      CastTile<In, kFormat, kUnroll>(b, tile(k - 1), p.vectors, scale, p.row);
    }
  }
}

template <typename In, Fp8Format kFormat, int kUnroll>
LaunchStatus LaunchCurrentCastOf(const Fp8QuantizeProblem& problem,
                                 const Fp8QuantizeBuffers& buffers,
                                 cudaStream_t stream, int sms) {
  auto* kernel = &CurrentCastKernel<In, kFormat, kUnroll>;
  constexpr int64_t kTile = kTileVectors<kUnroll>;
  constexpr int64_t kKeptBytes = kKeptTiles * kTile * 16;
  CurrentCastParams p;
  p.x = buffers.x;
  p.fallback = buffers.scale;
  p.row = buffers.row;
  p.scale_inv = buffers.scale_inv;
  p.amax = buffers.amax;
  p.vectors = problem.rows * problem.cols / In::kVec;
  p.tiles = (p.vectors + kTile - 1) / kTile;
  cudaError_t error = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(kKeptBytes));
  if (error != cudaSuccess) {
    return Failed(error, "setting CurrentCastKernel's shared memory");
  }
  // At most one block per SM, all resident at once for the grid sync (fewer
  // SMs may be available to this context than the device has), and none
  // without a tile.
  static const int64_t resident =
      int64_t{BlocksPerSm(kernel, kThreads, static_cast<size_t>(kKeptBytes))} *
      sms;
  const int64_t grid = std::max<int64_t>(
      1, std::min({int64_t{sms}, resident, p.tiles}));
  const int64_t kept_tiles =
      std::min<int64_t>(kKeptTiles, (p.tiles + grid - 1) / grid);
  const size_t shared_bytes = static_cast<size_t>(kept_tiles * kTile * 16);
  p.l2_tiles = L2TilesPerBlock(grid, kTile * 16);
  p.hints = UseL2Hints();
  error = Launch(kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads),
                 shared_bytes, stream, 1, p, /*cooperative=*/true);
  if (error != cudaSuccess) return Failed(error, "launching CurrentCastKernel");
  return LaunchStatus{};
}

}  // namespace

bool CurrentCastApplies(const Fp8QuantizeProblem& problem,
                        const Fp8QuantizeBuffers& buffers) {
  const int vec = VectorElements(problem.input_type);
  return problem.scale_from_amax && problem.batch == 1 && problem.rowwise &&
         !problem.colwise && !problem.with_dbias &&
         (problem.rows * problem.cols) % vec == 0 && Aligned16(buffers.x) &&
         Aligned16(buffers.row);
}

LaunchStatus LaunchCurrentCast(const Fp8QuantizeProblem& problem,
                               const Fp8QuantizeBuffers& buffers,
                               cudaStream_t stream, int sms) {
  const int64_t vectors =
      problem.rows * problem.cols / VectorElements(problem.input_type);
  // Small tiles where large ones would leave over half the SMs idle.
  const bool small = 2 * vectors <= kTileVectors<kLargeUnroll> * sms;
  return DispatchTypes(problem, [&](auto input, auto format) {
    using In = decltype(input);
    constexpr Fp8Format kFormat = decltype(format)::value;
    return small ? LaunchCurrentCastOf<In, kFormat, kSmallUnroll>(
                       problem, buffers, stream, sms)
                 : LaunchCurrentCastOf<In, kFormat, kLargeUnroll>(
                       problem, buffers, stream, sms);
  });
}

}  // namespace eqx_quant::cuda::fp8
