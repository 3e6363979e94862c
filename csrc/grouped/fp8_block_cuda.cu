// CUDA kernel of eqx_quant_grouped_fp8_block_quantize (sm_90a): per group,
// the dense FP8 block quantize of the group's rows, bit for bit the CPU
// kernel's bytes (grouped/fp8_block_cpu.cc; layout in
// common/grouped_problem.h).
//
// GroupedTileKernel: one launch, one pass over x. A group's rows are cut into
// tiles of 128 rows from its first row (its units: group g has
// k_g = ceil(rows_g / 128), the u-th unit over all groups is unit u of the
// stacked scale matrices). The grid is (units x column blocks, examples):
//   CTA (u, cb) with u < the units of all groups: the tile of unit u, column
//     block cb, found on the device from group_sizes (grouped_dev::LocateUnit,
//     one warp-level pass over the sizes), quantized by the dense kernel's
//     QuantizeTile (fp8_block/tile_cuda.cuh) at the tile's place in the
//     grouped layout;
//   CTA (u, cb) with u past them but below W: writes 0 to the scale entries of
//     unit u (no group's);
//   and every CTA (u, cb) with start_G + 128 u < R zeroes the data rows
//     [start_G + 128 u, start_G + 128 (u + 1)) of its column block, which
//     belong to no group, and gives them the 1x128 rowwise scale_inv of an
//     all-zero block.
// So every output byte is written by exactly one CTA, and nothing is
// zero-filled before the launch. Nothing is allocated and nothing
// synchronises (graph-capturable).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/fp8_block_problem.h"
#include "common/fp8_format.h"
#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "common/magic_division.h"
#include "fp8_block/tile_cuda.cuh"
#include "grouped/device_cuda.cuh"
#include "grouped/quantize_cuda.h"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda {
namespace {

using fp8_block_tile::Aligned;
using fp8_block_tile::ColStoreBytes;
using fp8_block_tile::Layout;
using fp8_block_tile::MinBlocks;
using fp8_block_tile::QuantizeTile;
using fp8_block_tile::TileParams;
using fp8_block_tile::TilePlace;
using grouped_dev::LocateUnit;
using grouped_dev::RowSpec;
using grouped_dev::UnitGroup;
using mxfp8::Bf16In;
using mxfp8::F16In;
using mxfp8::F32In;

constexpr int kB = static_cast<int>(kFp8Block);
static_assert(grouped_dev::kScaleUnitRows == kB, "LocateUnit counts 128-row units");

struct GroupedParams {
  TileParams tile;
  const int32_t* group_sizes;
  RowSpec rs;           // R, U
  int64_t groups;       // G
  uint32_t units;       // W: the scale matrices' units
  MagicDivisor cb_div;  // by cb_count
  uint32_t first_example;
  float zero_scale_inv;  // 1x128 rowwise, rows of no group
  bool wide_tail;        // N % 16 == 0 and 16-byte aligned data: 16-byte zeroing
};

// Zeroes rows [first, last) (at most 128) x columns [c0, c0 + width) of the
// row-major (R, N) byte matrix `out` of one example.
template <int kThreads>
__device__ __forceinline__ void ZeroTailRows(uint8_t* out, int64_t cols, int64_t first,
                                             int64_t last, int64_t c0, int width,
                                             bool wide) {
  if (wide) {  // width % 16 == 0: 8 vectors per full row
    const int vectors = width / 16;
    for (int i = threadIdx.x; i < kB * 8; i += kThreads) {
      const int64_t r = first + i / 8;
      const int v = i % 8;
      if (r < last && v < vectors) {
        *reinterpret_cast<uint4*>(out + r * cols + c0 + 16 * v) = make_uint4(0, 0, 0, 0);
      }
    }
  } else {
    for (int i = threadIdx.x; i < kB * kB; i += kThreads) {
      const int64_t r = first + i / kB;
      const int c = i % kB;
      if (r < last && c < width) out[r * cols + c0 + c] = 0;
    }
  }
}

template <typename In, Fp8Format kFormat, bool kRow, bool kCol, bool kAligned>
__global__ void __launch_bounds__(Layout<In>::kThreads, (MinBlocks<In, kAligned>()))
    GroupedTileKernel(const __grid_constant__ GroupedParams p) {
  constexpr int kThreads = Layout<In>::kThreads;
  const uint32_t unit = MagicQuotient(blockIdx.x, p.cb_div);
  const uint32_t cb = blockIdx.x - unit * p.tile.cb_count;
  const int64_t b = int64_t{p.first_example} + blockIdx.y;
  const int64_t R = p.rs.rows;
  const int64_t N = p.tile.cols;
  const int64_t nb = p.tile.cb_count;
  const int64_t W = p.units;
  const int64_t c0 = int64_t{cb} * kB;
  const int tile_cols = static_cast<int>(min(int64_t{kB}, N - c0));

  const UnitGroup where = LocateUnit(p.group_sizes + b * p.groups, p.groups, p.rs, unit);
  if (where.found) {  // CTA-uniform
    const int64_t local0 = int64_t{unit - where.first} * kB;
    TilePlace at;
    at.row0 = b * R + where.start + local0;
    at.c0 = c0;
    at.cb = cb;
    at.tile_rows = static_cast<int>(min(int64_t{kB}, int64_t{where.count} - local0));
    at.tile_cols = tile_cols;
    at.col_base = kCol ? p.tile.col + (b * R + where.start) * N : nullptr;
    at.col_rows = where.count;
    at.col_r0 = local0;
    at.col_store = kCol ? ColStoreBytes(where.count, at.col_base) : 1;
    at.row_scale_2d = (b * W + unit) * nb + cb;  // (W, nb)
    at.col_scale_2d = (b * nb + cb) * W + unit;  // (nb, W)
    at.col_scale_1d = (b * N + c0) * W + unit;   // (N, W)
    at.col_scale_stride = W;
    QuantizeTile<In, kFormat, kRow, kCol, kAligned>(p.tile, at);
  } else if (unit < W) {  // scale entries of no group: 0
    if (p.tile.use_2d) {
      if (threadIdx.x == 0) {
        if (kRow) p.tile.row_scale[(b * W + unit) * nb + cb] = 0.0f;
        if (kCol) p.tile.col_scale[(b * nb + cb) * W + unit] = 0.0f;
      }
    } else if (kCol && threadIdx.x < tile_cols) {
      p.tile.col_scale[(b * N + c0 + threadIdx.x) * W + unit] = 0.0f;
    }
  }

  // Tail unit `unit`: its rows of no group, in this CTA's column block.
  const int64_t tail0 = int64_t{where.end} + int64_t{unit} * kB;
  if (tail0 < R) {
    const int64_t tail1 = min(R, tail0 + kB);
    if (kRow) {
      ZeroTailRows<kThreads>(p.tile.row + b * R * N, N, tail0, tail1, c0, tile_cols,
                             p.wide_tail);
      if (!p.tile.use_2d && threadIdx.x < tail1 - tail0) {
        p.tile.row_scale[(b * R + tail0 + threadIdx.x) * nb + cb] = p.zero_scale_inv;
      }
    }
    if (kCol) {
      ZeroTailRows<kThreads>(p.tile.col + b * R * N, N, tail0, tail1, c0, tile_cols,
                             p.wide_tail);
    }
  }
}

// ---------------------------------------------------------------------------
// Host side.

template <typename In, Fp8Format kFormat, bool kRow, bool kCol>
GroupedLaunchStatus LaunchTiles(const GroupedParams& p, const GroupedFp8BlockQuantizeBuffers& buf,
                                dim3 grid, cudaStream_t stream) {
  constexpr int kVec = In::kVec;
  const bool aligned = Aligned(buf.x, 16) && p.tile.cols % kVec == 0 &&
                       (!kRow || Aligned(buf.row, kVec));
  auto* kernel = aligned ? &GroupedTileKernel<In, kFormat, kRow, kCol, true>
                         : &GroupedTileKernel<In, kFormat, kRow, kCol, false>;
  kernel<<<grid, Layout<In>::kThreads, 0, stream>>>(p);
  return grouped_dev::CheckLaunch("launching the grouped FP8 block GroupedTileKernel");
}

template <typename In, Fp8Format kFormat>
GroupedLaunchStatus LaunchFormat(const GroupedParams& p,
                                 const GroupedFp8BlockQuantizeBuffers& buf, bool rowwise,
                                 bool colwise, dim3 grid, cudaStream_t stream) {
  if (rowwise && colwise) return LaunchTiles<In, kFormat, true, true>(p, buf, grid, stream);
  if (rowwise) return LaunchTiles<In, kFormat, true, false>(p, buf, grid, stream);
  return LaunchTiles<In, kFormat, false, true>(p, buf, grid, stream);
}

template <typename In>
GroupedLaunchStatus LaunchInput(const Fp8BlockQuantizeProblem& s, const GroupedParams& p,
                                const GroupedFp8BlockQuantizeBuffers& buf, dim3 grid,
                                cudaStream_t stream) {
  if (s.format == Fp8Format::kE4M3Fn) {
    return LaunchFormat<In, Fp8Format::kE4M3Fn>(p, buf, s.rowwise, s.colwise, grid, stream);
  }
  return LaunchFormat<In, Fp8Format::kE5M2>(p, buf, s.rowwise, s.colwise, grid, stream);
}

}  // namespace

GroupedLaunchStatus GroupedFp8BlockQuantize(const GroupedFp8BlockQuantizeProblem& problem,
                                            const GroupedFp8BlockQuantizeBuffers& buffers,
                                            CUstream_st* stream) {
  const GroupedView& v = problem.view;
  const Fp8BlockQuantizeProblem& s = problem.block;
  if (v.batch == 0 || v.rows == 0 || v.cols == 0) return {};
  if (!s.rowwise && !s.colwise) return {};
  if (v.rows >= (int64_t{1} << 25)) {
    return grouped_dev::Unsupported(
        "the grouped FP8 block CUDA kernel takes fewer than 2^25 rows per example");
  }
  const int64_t cb_count = Fp8Blocks(v.cols);
  const int64_t grid_units = std::max(problem.units, Fp8Blocks(v.rows));
  if (grid_units * cb_count > int64_t{0x7FFFFFFF}) {
    return grouped_dev::Unsupported(
        "the grouped FP8 block CUDA kernel takes at most 2^31 - 1 tiles per example");
  }
  GroupedParams p{};
  p.tile = fp8_block_tile::MakeTileParams(s, v.cols, buffers);
  p.group_sizes = buffers.group_sizes;
  p.rs = RowSpec::Make(v.rows, v.rows_per_unit);
  p.groups = v.groups;
  p.units = static_cast<uint32_t>(problem.units);
  p.cb_div = MakeMagicDivisor(p.tile.cb_count);
  p.zero_scale_inv = Fp8BlockZeroScaleInv(s);
  p.wide_tail = v.cols % 16 == 0 && (!s.rowwise || Aligned(buffers.row, 16)) &&
                (!s.colwise || Aligned(buffers.col, 16));
  constexpr int64_t kMaxGridY = 65535;
  for (int64_t first = 0; first < v.batch; first += kMaxGridY) {
    p.first_example = static_cast<uint32_t>(first);
    const dim3 grid(static_cast<unsigned>(grid_units * cb_count),
                    static_cast<unsigned>(std::min(kMaxGridY, v.batch - first)));
    GroupedLaunchStatus status;
    switch (v.input_type) {
      case InputType::kF32:
        status = LaunchInput<F32In>(s, p, buffers, grid, stream);
        break;
      case InputType::kF16:
        status = LaunchInput<F16In>(s, p, buffers, grid, stream);
        break;
      case InputType::kBF16:
        status = LaunchInput<Bf16In>(s, p, buffers, grid, stream);
        break;
      default:
        return grouped_dev::Unsupported("unknown input type");
    }
    if (!status.ok) return status;
  }
  return {};
}

}  // namespace eqx_quant::cuda
