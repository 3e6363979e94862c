// CUDA kernel of eqx_quant_grouped_fp8_quantize (tensor scaling) and
// eqx_quant_grouped_mxfp8_quantize for sm_90a. Bit-exact with the CPU kernels
// (grouped/quantize_cpu.cc), which hand each group to the dense CPU
// kernels: per group g, with its rows [start_g, start_g + rows_g),
//   tensor scaling: byte = fp8_RN_sat(fl(x * scale_g)), amax_g = NaN-ignoring
//     max |x| of the group (0 if empty), scale_inv_g = fl(1 / scale_g) (NaN
//     canonical); colwise = the group's (N, rows_g) transpose at start_g * N;
//   MXFP8: the dense MXFP8 rule (mxfp8/quantize_cuda.cu) with colwise
//     blocks of 32 rows from the group's start; the scales in the group's
//     swizzled region (common/grouped_layout.h).
// The element arithmetic is the dense CUDA kernels' (mxfp8/device_cuda.cuh:
// E8M0 scale, __fmul_rn, the hardware FP8 convert that equals
// FloatToFp8 on every f32). Compiled with --fmad=false --ftz=false.
//
// TileKernel (256 threads, one unit per CTA, see grouped/device_cuda.cuh for
// the units): a unit is a tile of 32 rows, aligned at its group's start, x
// 256 columns. The CTA locates its tile (block scans of the group sizes),
// loads it as f32 into shared memory (a warp reads 32 consecutive columns of
// a row; rows past the group and columns past N are 0, which changes no block
// amax), then
//   rowwise: thread (r, b) = (t / 8, t % 8) quantizes the 32-element block b
//     of row r and stores its 32 bytes (two 16-byte stores when aligned);
//   colwise: thread t quantizes column t of the tile (one MXFP8 block). MXFP8
//     (N layout): byte stores, a warp writes 32 consecutive bytes per row.
//     Tensor scaling (T layout): the bytes are transposed through shared
//     memory and each warp writes 32 consecutive bytes of a T row per store.
// Shared tile element (r, c) is at r * 264 + c + c / 32, so both the block
// reads of the rowwise threads and the column reads are conflict-free.
// Tensor scaling: the tile's amax key is reduced in the CTA and merged with
// one atomicMax on the float bits (exact: the values are non-negative) into
// the zero-filled amax; CTA 0 of each example writes scale_inv.
// Tail units zero the data rows that belong to no group.
//
// Faster paths for MXFP8, tried first, each writing whole swizzled scale
// tiles (or sectors) and the buffers' slack itself, so no memset runs before
// them: RowOctetKernel for rowwise only (grouped/mxfp8_row_cuda.cu:
// TryMxfp8RowOctet), UnitTileKernel for colwise and rowwise + colwise
// (grouped/mxfp8_unit_cuda.cu: TryMxfp8UnitTile). TileKernel serves the rest
// (rows not a whole number of 16-byte vectors, unaligned buffers, R >=
// 2^25, batch > 65535).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/e8m0.h"
#include "common/fp8_format.h"
#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "grouped/device_cuda.cuh"
#include "grouped/quantize_cuda.h"
#include "grouped/rcp_cuda.cuh"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda {
namespace {

using namespace grouped_dev;  // NOLINT: the shared helpers of the grouped ops
using mxfp8::BlockScale;
using mxfp8::Bf16In;
using mxfp8::F16In;
using mxfp8::F32In;
using mxfp8::F32Key;

constexpr int kTileRows = 32;  // one MXFP8 colwise block
constexpr int kTileCols = 256;
constexpr int kPitch = kTileCols + kTileCols / 32;  // floats per shared row
constexpr int kTPitchWords = kTileRows / 4 + 1;     // T staging: 36 bytes

__device__ __forceinline__ int TileIndex(int r, int c) {
  return r * kPitch + c + c / 32;
}

struct TileParams {
  const void* x;
  const int32_t* group_sizes;
  const float* scale;  // tensor scaling: batch x G
  float* scale_inv;    // tensor scaling: batch x G
  float* amax;         // tensor scaling: batch x G (zero-filled)
  uint8_t* row;
  uint8_t* row_scale;  // MXFP8
  uint8_t* col;
  uint8_t* col_scale;  // MXFP8
  int64_t batch;
  RowSpec rs;    // R, U
  int64_t rows;  // R
  int64_t cols;  // N
  int64_t groups;
  int64_t row_scale_bytes;  // per example (MXFP8)
  int64_t col_scale_bytes;  // per example (MXFP8)
  int64_t col_tiles;        // ceil(N / 256)
  int64_t group_units;      // W(R, G, 32)
};

// 32 FP8 bytes (8 little-endian words) to dst[0..count).
__device__ __forceinline__ void Store32(uint8_t* dst, const uint32_t (&q)[8],
                                        int count) {
  if (count == 32 && (reinterpret_cast<uintptr_t>(dst) & 15u) == 0) {
    StoreStreaming16(dst, make_uint4(q[0], q[1], q[2], q[3]));
    StoreStreaming16(dst + 16, make_uint4(q[4], q[5], q[6], q[7]));
    return;
  }
#pragma unroll
  for (int e = 0; e < 32; ++e) {
    if (e < count) dst[e] = static_cast<uint8_t>(q[e / 4] >> (8 * (e % 4)));
  }
}

// The 32 values times `factor`, cast to FP8, as 8 words.
template <Fp8Format kFormat>
__device__ __forceinline__ void Cast32(const float (&v)[32], float factor,
                                       uint32_t (&q)[8]) {
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    q[w] = CvtPair<kFormat>(__fmul_rn(v[4 * w], factor),
                            __fmul_rn(v[4 * w + 1], factor)) |
           (CvtPair<kFormat>(__fmul_rn(v[4 * w + 2], factor),
                             __fmul_rn(v[4 * w + 3], factor))
            << 16);
  }
}

template <typename In, Fp8Format kFormat, bool kMx, bool kRow, bool kCol>
__global__ void __launch_bounds__(kThreads)
    TileKernel(const __grid_constant__ TileParams p) {
  using Storage = typename In::Storage;
  constexpr bool kTStage = !kMx && kCol;  // tensor-scaling T layout
  __shared__ float tile[kTileRows * kPitch];
  __shared__ uint32_t t_bytes[kTStage ? kTileCols * kTPitchWords : 1];
  __shared__ LocateShared sh;
  __shared__ uint32_t warp_keys[kWarps];

  const int t = threadIdx.x;
  const int64_t R = p.rows;
  const int64_t N = p.cols;
  const int64_t G = p.groups;
  const int64_t unit = blockIdx.x;
  const int64_t elements = R * N;

  for (int64_t ex = blockIdx.z; ex < p.batch; ex += gridDim.z) {
    const int32_t* sizes = p.group_sizes + ex * G;
    if constexpr (!kMx) {
      // Every group's scale_inv = fl(1 / scale) (NaN canonical), also of
      // empty groups. ExactReciprocal, not __frcp_rn: the latter's slow path
      // is a call, which makes ptxas spill registers of the tile code.
      if (blockIdx.x == 0 && blockIdx.y == 0) {
        for (int64_t g = t; g < G; g += kThreads) {
          p.scale_inv[ex * G + g] =
              grouped_rcp::ExactReciprocal(p.scale[ex * G + g]);
        }
      }
    }
    for (int64_t ct = blockIdx.y; ct < p.col_tiles; ct += gridDim.y) {
      const int64_t col0 = ct * kTileCols;
      uint8_t* const row = kRow ? p.row + ex * elements : nullptr;
      uint8_t* const col = kCol ? p.col + ex * elements : nullptr;

      if (unit >= p.group_units) {  // a tail unit
        const int64_t end = GroupsEnd(sizes, G, p.rs, sh.warp_sums);
        const int64_t first = end + (unit - p.group_units) * kTileRows;
        const int64_t last = min(R, first + kTileRows);
        const int64_t width = min(int64_t{kTileCols}, N - col0);
        if (first < last && width > 0) {
          if (kRow) ZeroRows<kTileCols>(row, N, first, last, col0, width);
          if (kCol) ZeroRows<kTileCols>(col, N, first, last, col0, width);
        }
        continue;
      }

      RegionSpec regions;
      regions.rowwise = kMx && kRow;
      regions.colwise = kMx && kCol;
      regions.block = grouped::kMxfp8Block;
      LocateTile<kTileRows>(sizes, G, p.rs, N, regions, unit, sh);
      const GroupTile& gt = sh.found;  // read where used: fewer registers
      if (gt.group < 0) continue;
      const int64_t first_local = gt.tile * kTileRows;  // in the group
      const int64_t row0 = gt.start + first_local;     // in the example
      const int tile_rows =
          static_cast<int>(min(int64_t{kTileRows}, gt.rows - first_local));
      const int tile_cols = static_cast<int>(min(int64_t{kTileCols}, N - col0));
      const int64_t slot = ex * G + gt.group;

      // The tile, as f32 (zeros outside the group and past N).
      const Storage* x = static_cast<const Storage*>(p.x) + ex * elements;
      const Storage* src = x + row0 * N + col0 + t;
      uint32_t key = 0;
#pragma unroll
      for (int i = 0; i < kTileRows; ++i) {
        float v = 0.0f;
        if (i < tile_rows && t < tile_cols) v = In::Scalar(src + i * N);
        tile[TileIndex(i, t)] = v;
        if constexpr (!kMx) key = max(key, F32Key(v));
      }
      if constexpr (!kMx) {
#pragma unroll
        for (int s = 16; s > 0; s /= 2) {
          key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, s));
        }
        if (t % 32 == 0) warp_keys[t / 32] = key;
      }
      __syncthreads();
      if constexpr (!kMx) {
        if (t == 0) {
          uint32_t m = 0;
#pragma unroll
          for (int w = 0; w < kWarps; ++w) m = max(m, warp_keys[w]);
          if (m != 0) {
            atomicMax(reinterpret_cast<unsigned int*>(p.amax + slot), m);
          }
        }
      }
      const float tensor_factor = kMx ? 0.0f : p.scale[slot];

      if constexpr (kRow) {
        const int r = t / 8;
        const int c0 = (t % 8) * 32;
        if (r < tile_rows && c0 < tile_cols) {
          float v[32];
#pragma unroll
          for (int e = 0; e < 32; ++e) v[e] = tile[TileIndex(r, c0 + e)];
          float factor = tensor_factor;
          uint32_t e8 = 0;
          if constexpr (kMx) {
            uint32_t k = 0;
#pragma unroll
            for (int e = 0; e < 32; ++e) k = max(k, F32Key(v[e]));
            e8 = BlockScale<kFormat>(__uint_as_float(k));
            factor = mxfp8::BlockFactor(e8);
          }
          uint32_t q[8];
          Cast32<kFormat>(v, factor, q);
          Store32(row + (row0 + r) * N + col0 + c0, q, min(32, tile_cols - c0));
          if constexpr (kMx) {
            const int64_t q_cols =
                grouped::PadTo(grouped::CeilDiv(N, grouped::kMxfp8Block), 4);
            p.row_scale[ex * p.row_scale_bytes + gt.row_region +
                        grouped::SwizzleOffset(first_local + r,
                                               (col0 + c0) / 32, q_cols)] = e8;
          }
        }
      }

      if constexpr (kCol) {
        const int64_t n = col0 + t;
        uint32_t q[8];
        if (t < tile_cols) {
          float v[32];
#pragma unroll
          for (int i = 0; i < 32; ++i) v[i] = tile[TileIndex(i, t)];
          float factor = tensor_factor;
          if constexpr (kMx) {
            uint32_t k = 0;
#pragma unroll
            for (int i = 0; i < 32; ++i) k = max(k, F32Key(v[i]));
            const uint32_t e8 = BlockScale<kFormat>(__uint_as_float(k));
            factor = mxfp8::BlockFactor(e8);
            const int64_t q_cols =
                grouped::PadTo(
                    grouped::CeilDiv(gt.rows, grouped::kMxfp8Block), 4);
            p.col_scale[ex * p.col_scale_bytes + gt.col_region +
                        grouped::SwizzleOffset(n, gt.tile, q_cols)] = e8;
          }
          Cast32<kFormat>(v, factor, q);
          if constexpr (kMx) {  // N layout: column n of rows row0 + i
            uint8_t* dst = col + row0 * N + n;
#pragma unroll
            for (int i = 0; i < 32; ++i) {
              if (i < tile_rows) {
                dst[i * N] = static_cast<uint8_t>(q[i / 4] >> (8 * (i % 4)));
              }
            }
          } else {
#pragma unroll
            for (int w = 0; w < 8; ++w) t_bytes[t * kTPitchWords + w] = q[w];
          }
        }
        if constexpr (kTStage) {
          // T layout: byte (n, i) at start_g * N + n * rows_g + first_local
          // + i.
          __syncthreads();
          const int lane = t % 32;
          const auto* staged = reinterpret_cast<const uint8_t*>(t_bytes);
          uint8_t* base = col + gt.start * N + first_local + lane;
          for (int k = 0; k < kTileCols / kWarps; ++k) {
            const int c = (t / 32) * (kTileCols / kWarps) + k;
            if (c < tile_cols && lane < tile_rows) {
              base[(col0 + c) * gt.rows] = staged[c * kTPitchWords * 4 + lane];
            }
          }
        }
      }
    }  // column tiles
  }  // examples
}

// ---------------------------------------------------------------------------
// Host side.

template <typename In, Fp8Format kFormat, bool kMx>
GroupedLaunchStatus LaunchLayout(const TileParams& p, bool rowwise,
                                 bool colwise, dim3 grid,
                                 cudaStream_t stream) {
  if (rowwise && colwise) {
    TileKernel<In, kFormat, kMx, true, true>
        <<<grid, kThreads, 0, stream>>>(p);
  } else if (rowwise) {
    TileKernel<In, kFormat, kMx, true, false>
        <<<grid, kThreads, 0, stream>>>(p);
  } else {
    TileKernel<In, kFormat, kMx, false, true>
        <<<grid, kThreads, 0, stream>>>(p);
  }
  return CheckLaunch(kMx ? "launching the grouped MXFP8 TileKernel"
                         : "launching the grouped FP8 TileKernel");
}

template <bool kMx>
GroupedLaunchStatus Launch(const GroupedView& v, Fp8Format format,
                           const TileParams& p, bool rowwise, bool colwise,
                           dim3 grid, cudaStream_t stream) {
  const bool e4m3 = format == Fp8Format::kE4M3Fn;
  constexpr auto kE4 = Fp8Format::kE4M3Fn;
  constexpr auto kE5 = Fp8Format::kE5M2;
  switch (v.input_type) {
    case InputType::kF32:
      return e4m3 ? LaunchLayout<F32In, kE4, kMx>(p, rowwise, colwise, grid,
                                                  stream)
                  : LaunchLayout<F32In, kE5, kMx>(p, rowwise, colwise, grid,
                                                  stream);
    case InputType::kF16:
      return e4m3 ? LaunchLayout<F16In, kE4, kMx>(p, rowwise, colwise, grid,
                                                  stream)
                  : LaunchLayout<F16In, kE5, kMx>(p, rowwise, colwise, grid,
                                                  stream);
    case InputType::kBF16:
      return e4m3 ? LaunchLayout<Bf16In, kE4, kMx>(p, rowwise, colwise, grid,
                                                   stream)
                  : LaunchLayout<Bf16In, kE5, kMx>(p, rowwise, colwise, grid,
                                                   stream);
  }
  return Unsupported("unknown input type");
}

TileParams BaseParams(const GroupedView& v) {
  TileParams p{};
  p.batch = v.batch;
  p.rows = v.rows;
  p.cols = v.cols;
  p.groups = v.groups;
  p.rs = RowSpec::Make(v.rows, v.rows_per_unit);
  return p;
}

constexpr char kTooLarge[] =
    "the tensor is too large (2^31 row tiles or more per example)";

}  // namespace

GroupedLaunchStatus GroupedFp8Quantize(const GroupedFp8QuantizeProblem& problem,
                                       const GroupedFp8QuantizeBuffers& buffers,
                                       CUstream_st* stream) {
  const GroupedView& v = problem.view;
  if (v.batch == 0) return GroupedLaunchStatus{};
  GroupedLaunchStatus status =
      ZeroFill(buffers.amax, v.batch * v.groups * int64_t{sizeof(float)},
               stream, "zero-filling amax (cudaMemsetAsync)");
  if (!status.ok) return status;
  TileParams p = BaseParams(v);
  p.x = buffers.x;
  p.group_sizes = buffers.group_sizes;
  p.scale = buffers.scale;
  p.scale_inv = buffers.scale_inv;
  p.amax = buffers.amax;
  p.row = problem.rowwise ? buffers.row : nullptr;
  p.col = problem.colwise ? buffers.col : nullptr;
  dim3 grid;
  if (!TileGrid(v.rows, v.cols, v.groups, kTileRows, kTileCols, v.batch,
                &p.group_units, &p.col_tiles, &grid)) {
    return Unsupported(kTooLarge);
  }
  return Launch<false>(v, problem.format, p, problem.rowwise, problem.colwise,
                       grid, stream);
}

GroupedLaunchStatus GroupedMxfp8Quantize(
    const GroupedMxfp8QuantizeProblem& problem,
    const GroupedMxfp8QuantizeBuffers& buffers, CUstream_st* stream) {
  const GroupedView& v = problem.view;
  if (v.batch == 0) return GroupedLaunchStatus{};
  if (v.rows * v.cols != 0) {
    bool taken = false;
    const GroupedLaunchStatus whole_tiles =
        problem.colwise ? TryMxfp8UnitTile(problem, buffers, stream, &taken)
                        : TryMxfp8RowOctet(problem, buffers, stream, &taken);
    if (taken || !whole_tiles.ok) return whole_tiles;
  }
  GroupedLaunchStatus status = ZeroScaleBuffers(problem, buffers, stream);
  if (!status.ok) return status;
  if (v.rows * v.cols == 0) return status;  // no data, scales all padding
  TileParams p = BaseParams(v);
  p.x = buffers.x;
  p.group_sizes = buffers.group_sizes;
  p.row = problem.rowwise ? buffers.row : nullptr;
  p.row_scale = problem.rowwise ? buffers.row_scale : nullptr;
  p.col = problem.colwise ? buffers.col : nullptr;
  p.col_scale = problem.colwise ? buffers.col_scale : nullptr;
  p.row_scale_bytes = problem.row_scale_bytes;
  p.col_scale_bytes = problem.col_scale_bytes;
  dim3 grid;
  if (!TileGrid(v.rows, v.cols, v.groups, kTileRows, kTileCols, v.batch,
                &p.group_units, &p.col_tiles, &grid)) {
    return Unsupported(kTooLarge);
  }
  return Launch<true>(v, problem.format, p, problem.rowwise, problem.colwise,
                      grid, stream);
}

}  // namespace eqx_quant::cuda
