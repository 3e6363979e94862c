// The cast + transpose kernel of eqx_quant_fp8_quantize (sm_90a): rowwise and
// transposed FP8 copies without dbias, for aligned shapes (TransposeApplies).
// See the top of fp8/quantize_cuda.cu for the launch sequence and the float
// semantics; the walk kernel (fp8/walk_cuda.cu) serves every other colwise
// problem.
//
// Blocks of 128 threads take 128 x 128 tiles (a grid-stride loop, tile
// columns fastest: one tile per block, or with kFusedAmax a persistent wave
// dealing them round robin). Per tile a thread loads its 16-byte vectors (one
// row lane x kVec columns, kUnroll rows in flight), casts them, stores the
// rowwise bytes at once (a warp covers whole 128-byte lines) and stages them
// in a 16 KiB shared tile, XOR-swizzled by 16-row block so that the
// transposed read is free of bank conflicts. After a barrier each thread
// takes units of 4 columns x 16 rows: 16 word loads, a 4x4 byte transpose per
// 4 rows and 4 16-byte stores; the 8 lanes sharing a column group write one
// whole 128-byte line of each of its 4 output rows. The amax of an example is
// published (one atomicMax per block) when the block's next tile belongs to
// another example or it has no tile left. With current scaling
// (scale_from_amax) the amax kernel has run first: every tile derives the
// scale from the finished amax, the first tile of each example writes
// scale_inv, nothing is published.
//
// Whole tiles (rows multiples of 128, columns of 128): kernels of their own,
// so that no template flag in CastTransposeKernel disturbs the fused
// kernel's register allocation. One tile body (CastTransposeWholeTile) with
// no bounds tests;
// tiles of 128 x 256 columns on 256 threads where the columns allow (4 CTAs
// per SM; a warp's load is one 512-byte row), else 128 x 128 on 128 threads.
//   * CastTransposeTileKernel: one tile per block of a (column tiles, row
//     tiles, examples) grid, no division to find it (about 40% fewer
//     instructions than the grid-stride kernel).
//   * CurrentTransposeTileKernel: kFusedAmax below for whole tiles, each tile
//     found with one 32-bit division, no amax in phase 2. From two
//     128-row sub-tiles per SM on, DbiasCurrentCastKernel<!kDbias>
//     (fp8/dbias_current_cuda.cu) takes these problems instead: it reads the
//     ring it keeps in shared memory once.
//
// kFusedAmax (current scaling of one example, CurrentTransposeApplies): the
// amax pass is the same kernel's phase 1, in one cooperative launch after
// InitKernel. Each block reads its own tiles, last first, with the same
// per-thread pattern as the cast; its first l2_tiles tiles (read last, about
// 60% of the L2 over all blocks) with L2 evict_last, the others and phase 2's
// re-reads evict_first. One atomicMax per block, a grid-wide sync, then the
// cast + transpose above: its first tiles come from L2, and the second launch
// of the two-pass path is gone.

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

constexpr int kTileRows = 128;
constexpr int kTileCols = 128;  // CastTransposeKernel's tiles (whole tiles: 128 or 256)
constexpr int kUnroll = 8;      // rows of loads in flight

struct TransposeParams {
  const void* x;
  const float* scale;
  uint8_t* row;  // null if not rowwise
  uint8_t* col;
  float* scale_inv;
  float* amax;
  int64_t rows;
  int64_t cols;
  int64_t row_tiles;
  int64_t col_tiles;
  int64_t tiles;  // batch * row_tiles * col_tiles
  int64_t l2_tiles;  // kFusedAmax: a block's first tiles kept in L2
  bool scale_from_amax;
  bool hints;  // kFusedAmax: L2 eviction priorities (else evict_normal)
};

// The shape of a tile staged in shared memory: kTileRows x kCols (128 or
// 256) columns on kCols threads (CastTransposeKernel: kTileCols).
template <int kCols>
struct StagedTile : StagedFp8Tile<kCols> {
  static constexpr int kThreads = kCols;
  static constexpr int kBlocksPerSm = 1024 / kThreads;
};
static_assert(kTileRows == kStagedRows, "the staged tiles' rows");

// CastTransposeKernel's staging (64 registers, 16 KiB staging per block).
using Tile = StagedTile<kTileCols>;
constexpr int kThreads = Tile::kThreads;
constexpr int kBlocksPerSm = Tile::kBlocksPerSm;

// A thread's part of a whole tile: column lane tid % kColLanes (one 16-byte
// vector per row), rows tid / kColLanes + kRowLanes * k.
template <typename In, int kCols>
struct TileLanes {
  static constexpr int kColLanes = kCols / In::kVec;  // 16 or 32 for 128 columns
  static constexpr int kRowLanes = StagedTile<kCols>::kThreads / kColLanes;  // 8 or 4
  static constexpr int kRowsPerThread = kTileRows / kRowLanes;
  static_assert(kRowsPerThread % kUnroll == 0, "whole batches of loads");
  // The kUnroll vectors of a batch: x[row_first + kRowLanes * u * cols]
  // (kHinted: with the L2 policy `policy`).
  template <bool kHinted>
  static __device__ __forceinline__ void LoadBatch(const typename In::Storage* x,
                                                   int64_t row_first, int64_t cols,
                                                   uint64_t policy,
                                                   uint4 (&raw)[kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const typename In::Storage* at = x + row_first + int64_t{kRowLanes} * u * cols;
      raw[u] = kHinted ? LoadStreaming(at, policy) : LoadStreaming(at);
    }
  }
};

// The end of a fused kernel's phase 1: the block's amax into *out (one
// atomicMax), then a grid-wide sync.
template <int kBlockThreads>
__device__ __forceinline__ void PublishAmaxAndSyncGrid(float amax,
                                                       float* warp_max,
                                                       float* out) {
  amax = BlockMax<kBlockThreads>(amax, warp_max);
  if (threadIdx.x == 0 && amax > 0.0f) {
    atomicMax(reinterpret_cast<unsigned int*>(out), __float_as_uint(amax));
  }
  cooperative_groups::this_grid().sync();
}

template <typename In, Fp8Format kFormat, bool kFusedAmax>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    CastTransposeKernel(const __grid_constant__ TransposeParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;
  constexpr int kColLanes = kTileCols / kVec;      // 16 (2-byte) or 32 (f32)
  constexpr int kRowLanes = kThreads / kColLanes;  // 8 or 4
  constexpr int kRowsPerThread = kTileRows / kRowLanes;
  static_assert(kRowsPerThread % kUnroll == 0, "whole batches of loads");
  __shared__ __align__(16) uint32_t staging[Tile::kStagingWords];
  __shared__ float warp_max[kThreads / 32];

  const int tid = threadIdx.x;
  const int col_lane = tid % kColLanes;
  const int row_lane = tid / kColLanes;
  const int64_t tiles_per_example = p.row_tiles * p.col_tiles;
  const int64_t elements = p.rows * p.cols;

  const uint64_t drop_policy = L2Policy(kFusedAmax && p.hints, /*keep=*/false);
  auto load = [&](const void* at, uint64_t policy) {
    return kFusedAmax ? LoadStreaming(at, policy) : LoadStreaming(at);
  };
  // This thread's kUnroll rows k0... of the tile at row m0, its column c
  // (zeros past the last row, or for an inactive lane).
  auto load_rows = [&](const Storage* x, int64_t m0, int64_t c, int k0,
                       bool active, uint64_t policy, uint4(&raw)[kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t m = m0 + row_lane + int64_t{kRowLanes} * (k0 + u);
      raw[u] = make_uint4(0u, 0u, 0u, 0u);
      if (active && m < p.rows) raw[u] = load(x + m * p.cols + c, policy);
    }
  };

  float amax = 0.0f;
  if constexpr (kFusedAmax) {
    // Phase 1 (one example): the amax over this block's tiles, last first,
    // with the cast's per-thread pattern (faster than a flat stream, last
    // chunks first).
    const uint64_t keep_policy = L2Policy(p.hints, /*keep=*/true);
    const Storage* x = static_cast<const Storage*>(p.x);
    const int64_t count = (p.tiles - blockIdx.x + gridDim.x - 1) / gridDim.x;
    for (int64_t k = count - 1; k >= 0; --k) {
      const int64_t t = blockIdx.x + k * gridDim.x;
      const int64_t m0 = (t / p.col_tiles) * kTileRows;
      const int64_t c = (t % p.col_tiles) * kTileCols + col_lane * kVec;
      const uint64_t policy = k < p.l2_tiles ? keep_policy : drop_policy;
      if (c >= p.cols) continue;
#pragma unroll 1
      for (int k0 = 0; k0 < kRowsPerThread; k0 += kUnroll) {
        uint4 raw[kUnroll];
        load_rows(x, m0, c, k0, true, policy, raw);
        amax = FoldAbsMax<In>(raw, amax);
      }
    }
    PublishAmaxAndSyncGrid<kThreads>(amax, warp_max, p.amax);
    amax = 0.0f;
  }

  for (int64_t t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    const int64_t b = t / tiles_per_example;
    const int64_t in_example = t % tiles_per_example;
    const int64_t m0 = (in_example / p.col_tiles) * kTileRows;
    const int64_t n0 = (in_example % p.col_tiles) * kTileCols;
    const int64_t c = n0 + col_lane * kVec;
    const bool lane_active = c < p.cols;  // cols % kVec == 0: whole vectors
    const float scale =
        ExampleScale<kFormat>(p.scale, p.amax, p.scale_from_amax, b);
    if (p.scale_from_amax && in_example == 0 && tid == 0) {
      p.scale_inv[b] = ScaleInverse(scale);
    }
    const Storage* x = static_cast<const Storage*>(p.x) + b * elements;
    uint8_t* row_out = p.row != nullptr ? p.row + b * elements : nullptr;

#pragma unroll 1
    for (int k0 = 0; k0 < kRowsPerThread; k0 += kUnroll) {
      uint4 raw[kUnroll];
      load_rows(x, m0, c, k0, lane_active, drop_policy, raw);
      // Offset of this thread's first row of the batch (the others follow
      // kRowLanes rows apart).
      const int64_t row_first =
          (m0 + row_lane + int64_t{kRowLanes} * k0) * p.cols + c;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int r = row_lane + kRowLanes * (k0 + u);
        float v[kVec];
        In::Unpack(raw[u], v);
#pragma unroll
        for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(v[e]));
        uint32_t q[kVec / 4];
        CastVec<kFormat>(v, scale, q);
        const int word = col_lane * (kVec / 4);
        StageCastWords(&staging[Tile::Staged(r, word)], q);
        if (row_out != nullptr && lane_active && m0 + r < p.rows) {
          StoreCastWords(row_out + row_first + int64_t{kRowLanes} * u * p.cols, q);
        }
      }
    }
    __syncthreads();

    // Transposed write-out: col[n][m] of this example. rows % 16 == 0, so a
    // unit's 16 rows are all inside the tensor or all outside.
    uint8_t* col = p.col + b * elements;
#pragma unroll
    for (int unit = tid; unit < Tile::kUnits; unit += kThreads) {
      const int block = unit % (kTileRows / 16);
      const int group = unit / (kTileRows / 16);
      const int64_t m = m0 + 16 * block;
      if (m >= p.rows || n0 + 4 * group >= p.cols) continue;
      uint32_t w[16];
#pragma unroll
      for (int k = 0; k < 16; ++k) w[k] = staging[Tile::Staged(16 * block + k, group)];
      uint32_t out[4][4];
      Transpose16x4(w, out);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t n = n0 + 4 * group + q;
        if (n < p.cols) {
          StoreStreaming16(col + n * p.rows + m,
                           make_uint4(out[q][0], out[q][1], out[q][2], out[q][3]));
        }
      }
    }

    // Publish the amax when the next tile is another example's (or none).
    const int64_t next = t + gridDim.x;
    if (!p.scale_from_amax &&
        (next >= p.tiles || next / tiles_per_example != b)) {
      const float block_max = BlockMax<kThreads>(amax, warp_max);
      if (tid == 0) PublishAmax(p.amax + b, block_max);
      amax = 0.0f;
    }
    __syncthreads();  // staging and warp_max are reused by the next tile
  }
}

// One whole tile at (m0, n0) of an example: the cast (rowwise bytes to
// row_out unless null), the staging, a barrier and the transposed write-out
// to col. Returns this thread's max |x| over its part of the tile (kAmax; 0
// otherwise). kHinted: loads with the L2 policy `policy`. The caller
// synchronises before the staging tile is reused.
template <typename In, Fp8Format kFormat, int kCols, bool kAmax, bool kHinted>
__device__ __forceinline__ float CastTransposeWholeTile(
    const typename In::Storage* x, uint8_t* row_out, uint8_t* col,
    int64_t rows, int64_t cols, int64_t m0, int64_t n0, float scale,
    uint64_t policy, uint32_t* staging) {
  using Shape = StagedTile<kCols>;
  using Lanes = TileLanes<In, kCols>;
  constexpr int kVec = In::kVec;
  constexpr int kRowLanes = Lanes::kRowLanes;
  const int tid = threadIdx.x;
  const int col_lane = tid % Lanes::kColLanes;
  const int row_lane = tid / Lanes::kColLanes;
  const int64_t c = n0 + col_lane * kVec;

  float amax = 0.0f;
#pragma unroll 1
  for (int k0 = 0; k0 < Lanes::kRowsPerThread; k0 += kUnroll) {
    // This thread's first row of the batch; the others follow kRowLanes rows
    // apart.
    const int64_t row_first =
        (m0 + row_lane + int64_t{kRowLanes} * k0) * cols + c;
    uint4 raw[kUnroll];
    Lanes::template LoadBatch<kHinted>(x, row_first, cols, policy, raw);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int r = row_lane + kRowLanes * (k0 + u);
      float v[kVec];
      In::Unpack(raw[u], v);
      if constexpr (kAmax) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(v[e]));
      }
      uint32_t q[kVec / 4];
      CastVec<kFormat>(v, scale, q);
      StageCastWords(&staging[Shape::Staged(r, col_lane * (kVec / 4))], q);
      if (row_out != nullptr) {
        StoreCastWords(row_out + row_first + int64_t{kRowLanes} * u * cols, q);
      }
    }
  }
  __syncthreads();

  // Transposed write-out: col[n][m] of this example.
#pragma unroll
  for (int unit = tid; unit < Shape::kUnits; unit += Shape::kThreads) {
    Shape::template WriteTransposedUnit<false>(staging, unit, col, rows, cols,
                                               m0, n0);
  }
  return amax;
}

template <typename In, Fp8Format kFormat, int kCols>
__global__ void __launch_bounds__(StagedTile<kCols>::kThreads,
                                  StagedTile<kCols>::kBlocksPerSm)
    CastTransposeTileKernel(const __grid_constant__ TransposeParams p) {
  using Shape = StagedTile<kCols>;
  __shared__ __align__(16) uint32_t staging[Shape::kStagingWords];
  __shared__ float warp_max[Shape::kThreads / 32];
  const int64_t b = blockIdx.z;
  const int64_t elements = p.rows * p.cols;
  const float scale =
      ExampleScale<kFormat>(p.scale, p.amax, p.scale_from_amax, b);
  if (p.scale_from_amax && blockIdx.x == 0 && blockIdx.y == 0 &&
      threadIdx.x == 0) {
    p.scale_inv[b] = ScaleInverse(scale);
  }
  const auto* x = static_cast<const typename In::Storage*>(p.x) + b * elements;
  uint8_t* row_out = p.row != nullptr ? p.row + b * elements : nullptr;
  const float amax = CastTransposeWholeTile<In, kFormat, kCols, true, false>(
      x, row_out, p.col + b * elements, p.rows, p.cols,
      int64_t{blockIdx.y} * kTileRows, int64_t{blockIdx.x} * kCols, scale, 0,
      staging);
  if (!p.scale_from_amax) {
    const float block_max = BlockMax<Shape::kThreads>(amax, warp_max);
    if (threadIdx.x == 0) PublishAmax(p.amax + b, block_max);
  }
}

// CastTransposeKernel<kFusedAmax> for whole tiles (rows a multiple of 128,
// columns of kCols, one example, fewer than 2^30 tiles; p.col_tiles and
// p.tiles count tiles of kCols columns): the same two phases, each tile found with one
// 32-bit division, no bounds tests, no amax in phase 2.
template <typename In, Fp8Format kFormat, int kCols>
__global__ void __launch_bounds__(StagedTile<kCols>::kThreads,
                                  StagedTile<kCols>::kBlocksPerSm)
    CurrentTransposeTileKernel(const __grid_constant__ TransposeParams p) {
  using Storage = typename In::Storage;
  using Shape = StagedTile<kCols>;
  using Lanes = TileLanes<In, kCols>;
  constexpr int kRowLanes = Lanes::kRowLanes;
  __shared__ __align__(16) uint32_t staging[Shape::kStagingWords];
  __shared__ float warp_max[Shape::kThreads / 32];

  const int tid = threadIdx.x;
  const int col_lane = tid % Lanes::kColLanes;
  const int row_lane = tid / Lanes::kColLanes;
  const int tiles = static_cast<int>(p.tiles);
  const int col_tiles = static_cast<int>(p.col_tiles);
  const Storage* x = static_cast<const Storage*>(p.x);
  const uint64_t drop_policy = L2Policy(p.hints, /*keep=*/false);

  // Phase 1: the amax over this block's tiles, last first; the first
  // l2_tiles of them (read last) kept in L2.
  {
    const uint64_t keep_policy = L2Policy(p.hints, /*keep=*/true);
    const int count = (tiles - static_cast<int>(blockIdx.x) + gridDim.x - 1) / gridDim.x;
    float amax = 0.0f;
    for (int k = count - 1; k >= 0; --k) {
      const int t = static_cast<int>(blockIdx.x) + k * static_cast<int>(gridDim.x);
      const int row_tile = t / col_tiles;
      const int64_t m0 = int64_t{row_tile} * kTileRows;
      const int64_t c = int64_t{t - row_tile * col_tiles} * kCols + col_lane * In::kVec;
      const uint64_t policy = k < p.l2_tiles ? keep_policy : drop_policy;
#pragma unroll 1
      for (int k0 = 0; k0 < Lanes::kRowsPerThread; k0 += kUnroll) {
        const int64_t row_first =
            (m0 + row_lane + int64_t{kRowLanes} * k0) * p.cols + c;
        uint4 raw[kUnroll];
        Lanes::template LoadBatch<true>(x, row_first, p.cols, policy, raw);
        amax = FoldAbsMax<In>(raw, amax);
      }
    }
    PublishAmaxAndSyncGrid<Shape::kThreads>(amax, warp_max, p.amax);
  }

  // Phase 2: the scale from the finished amax, the cast + transpose.
  const float scale = ExampleScale<kFormat>(p.scale, p.amax, true, 0);
  if (blockIdx.x == 0 && tid == 0) p.scale_inv[0] = ScaleInverse(scale);
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int row_tile = t / col_tiles;
    CastTransposeWholeTile<In, kFormat, kCols, false, true>(
        x, p.row, p.col, p.rows, p.cols, int64_t{row_tile} * kTileRows,
        int64_t{t - row_tile * col_tiles} * kCols, scale, drop_policy, staging);
    __syncthreads();  // the staging tile is reused by the next tile
  }
}

}  // namespace

bool TransposeApplies(const Fp8QuantizeProblem& problem,
                      const Fp8QuantizeBuffers& buffers) {
  return problem.colwise && !problem.with_dbias && problem.rows % 16 == 0 &&
         problem.cols % VectorElements(problem.input_type) == 0 &&
         Aligned16(buffers.x) && Aligned16(buffers.col) &&
         (!problem.rowwise || Aligned16(buffers.row));
}

namespace {

// The kernels' parameters of a problem (tiles of kTileRows x tile_cols,
// partial ones at the ends).
TransposeParams TransposeParamsOf(const Fp8QuantizeProblem& problem,
                                  const Fp8QuantizeBuffers& buffers,
                                  int64_t tile_cols = kTileCols) {
  TransposeParams p = {};
  p.x = buffers.x;
  p.scale = buffers.scale;
  p.row = problem.rowwise ? buffers.row : nullptr;
  p.col = buffers.col;
  p.scale_inv = buffers.scale_inv;
  p.amax = buffers.amax;
  p.rows = problem.rows;
  p.cols = problem.cols;
  p.row_tiles = (problem.rows + kTileRows - 1) / kTileRows;
  p.col_tiles = (problem.cols + tile_cols - 1) / tile_cols;
  p.tiles = problem.batch * p.row_tiles * p.col_tiles;
  p.scale_from_amax = problem.scale_from_amax;
  return p;
}

// The cast + transpose (kFusedAmax: with the amax pass in front, one
// cooperative launch).
template <bool kFusedAmax>
LaunchStatus LaunchTransposeKernel(const Fp8QuantizeProblem& problem,
                                   const Fp8QuantizeBuffers& buffers,
                                   cudaStream_t stream, int sms) {
  return DispatchTypes(problem, [&](auto input, auto format) -> LaunchStatus {
    using In = decltype(input);
    constexpr Fp8Format kFormat = decltype(format)::value;
    auto* kernel = &CastTransposeKernel<In, kFormat, kFusedAmax>;
    TransposeParams p = TransposeParamsOf(problem, buffers);
    if (p.tiles <= 0) return LaunchStatus{};
    // A cooperative grid is one wave of resident blocks; otherwise one block
    // per tile (short blocks stream faster than a persistent wave:
    // benchmarks/probes/stream_cast.cu).
    static const int blocks_per_sm =
        std::min(kBlocksPerSm, BlocksPerSm(kernel, kThreads, 0));
    const int64_t grid = std::min(
        p.tiles, kFusedAmax ? int64_t{sms} * blocks_per_sm : int64_t{0x7FFFFFFF});
    if (kFusedAmax) {
      const int64_t tile_bytes = int64_t{kTileRows} * kTileCols *
                                 static_cast<int64_t>(sizeof(typename In::Storage));
      p.l2_tiles = L2TilesPerBlock(grid, tile_bytes);
      p.hints = UseL2Hints();
    }
    const cudaError_t error =
        Launch(kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), 0, stream, 1, p,
               /*cooperative=*/kFusedAmax);
    if (error != cudaSuccess) return Failed(error, "launching CastTransposeKernel");
    return LaunchStatus{};
  });
}

// Whole tiles (CastTransposeTileKernel): one block each on a (column tiles,
// row tiles, examples) grid.
template <int kCols>
LaunchStatus LaunchTransposeTiles(const Fp8QuantizeProblem& problem,
                                  const Fp8QuantizeBuffers& buffers,
                                  cudaStream_t stream) {
  return DispatchTypes(problem, [&](auto input, auto format) -> LaunchStatus {
    using In = decltype(input);
    constexpr Fp8Format kFormat = decltype(format)::value;
    const TransposeParams p = TransposeParamsOf(problem, buffers, kCols);
    if (p.tiles <= 0) return LaunchStatus{};
    const dim3 grid(static_cast<unsigned>(p.col_tiles),
                    static_cast<unsigned>(p.row_tiles),
                    static_cast<unsigned>(problem.batch));
    const cudaError_t error =
        Launch(&CastTransposeTileKernel<In, kFormat, kCols>, grid,
               dim3(StagedTile<kCols>::kThreads), 0, stream, 1, p);
    if (error != cudaSuccess) return Failed(error, "launching CastTransposeTileKernel");
    return LaunchStatus{};
  });
}

// The fused whole-tile kernel (CurrentTransposeTileKernel): one cooperative
// wave of resident blocks dealing the tiles round robin.
template <int kCols>
LaunchStatus LaunchCurrentTransposeTiles(const Fp8QuantizeProblem& problem,
                                         const Fp8QuantizeBuffers& buffers,
                                         cudaStream_t stream, int sms) {
  return DispatchTypes(problem, [&](auto input, auto format) -> LaunchStatus {
    using In = decltype(input);
    using Shape = StagedTile<kCols>;
    constexpr Fp8Format kFormat = decltype(format)::value;
    auto* kernel = &CurrentTransposeTileKernel<In, kFormat, kCols>;
    TransposeParams p = TransposeParamsOf(problem, buffers, kCols);
    if (p.tiles <= 0) return LaunchStatus{};
    static const int blocks_per_sm =
        std::min(Shape::kBlocksPerSm, BlocksPerSm(kernel, Shape::kThreads, 0));
    const int64_t grid = std::min(p.tiles, int64_t{sms} * blocks_per_sm);
    const int64_t tile_bytes = int64_t{kTileRows} * kCols *
                               static_cast<int64_t>(sizeof(typename In::Storage));
    p.l2_tiles = L2TilesPerBlock(grid, tile_bytes);
    p.hints = UseL2Hints();
    const cudaError_t error =
        Launch(kernel, dim3(static_cast<unsigned>(grid)), dim3(Shape::kThreads), 0,
               stream, 1, p, /*cooperative=*/true);
    if (error != cudaSuccess) return Failed(error, "launching CurrentTransposeTileKernel");
    return LaunchStatus{};
  });
}

bool WholeTiles(const Fp8QuantizeProblem& problem) {
  return problem.rows % kTileRows == 0 && problem.cols % kTileCols == 0;
}

}  // namespace

LaunchStatus LaunchTranspose(const Fp8QuantizeProblem& problem,
                             const Fp8QuantizeBuffers& buffers,
                             cudaStream_t stream, int sms) {
  const bool whole_tiles =
      WholeTiles(problem) && problem.cols / kTileCols <= 0x7FFFFFFF &&
      problem.rows / kTileRows <= 65535 && problem.batch <= 65535;
  if (whole_tiles) {
    if (problem.cols % 256 == 0) return LaunchTransposeTiles<256>(problem, buffers, stream);
    return LaunchTransposeTiles<128>(problem, buffers, stream);
  }
  return LaunchTransposeKernel<false>(problem, buffers, stream, sms);
}

bool CurrentTransposeApplies(const Fp8QuantizeProblem& problem,
                             const Fp8QuantizeBuffers& buffers) {
  return problem.scale_from_amax && problem.batch == 1 &&
         TransposeApplies(problem, buffers);
}

LaunchStatus LaunchCurrentTranspose(const Fp8QuantizeProblem& problem,
                                    const Fp8QuantizeBuffers& buffers,
                                    cudaStream_t stream, int sms) {
  if (RingCurrentTransposeTakes(problem, sms)) {
    return LaunchRingCurrentTranspose(problem, buffers, stream, sms);
  }
  // Whole tiles, few enough for 32-bit tile indices (plus a grid).
  const int64_t tiles = (problem.rows / kTileRows) * (problem.cols / kTileCols);
  if (WholeTiles(problem) && tiles < (int64_t{1} << 30)) {
    if (problem.cols % 256 == 0) {
      return LaunchCurrentTransposeTiles<256>(problem, buffers, stream, sms);
    }
    return LaunchCurrentTransposeTiles<128>(problem, buffers, stream, sms);
  }
  return LaunchTransposeKernel<true>(problem, buffers, stream, sms);
}

}  // namespace eqx_quant::cuda::fp8
