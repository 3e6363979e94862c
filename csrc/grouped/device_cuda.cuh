// Device helpers shared by the grouped CUDA kernels
// (grouped/quantize_cuda.cu, grouped/mxfp8_row_cuda.cu,
// grouped/nvfp4_cuda.cu, grouped/dbias_cuda.cu): the on-device group offsets
// (block and warp scans of the group sizes), the mapping of a row-tile unit
// to its group, and the host-side launch helpers. Internal to those files.
//
// Work units of the row-tiled kernels. An example's row tiles are TR rows
// aligned at each group's start: group g has ceil(rows_g / TR) of them, and
// over all groups there are at most W = WorstCaseUnits(R, G, TR) (a static
// bound). The grid is (units, column tiles, examples):
//   blockIdx.x = unit in [0, W): the unit-th row tile of the groups, counted
//                group after group (CTAs with no tile exit);
//              = unit in [W, W + ceil(R/TR)): tail unit u = unit - W zeroes
//                the data rows [start_G + u*TR, start_G + (u+1)*TR) ∩ [0, R),
//                which belong to no group;
//   blockIdx.y strides over the column tiles, blockIdx.z over the examples
//   (no integer division by a variable anywhere: ptxas makes those calls,
//   and a call makes it spill).

#ifndef EQX_QUANT_CSRC_GROUPED_DEVICE_CUDA_CUH_
#define EQX_QUANT_CSRC_GROUPED_DEVICE_CUDA_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/grouped_layout.h"
#include "grouped/quantize_cuda.h"

namespace eqx_quant::cuda::grouped_dev {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// The rows of an example and how group sizes count them. `max_size` =
// R / U is computed on the host (a 64-bit division by a variable is a call
// on the device, and calls spill registers).
struct RowSpec {
  int64_t rows;       // R
  int64_t unit_rows;  // U >= 1
  int64_t max_size;   // R / U

  static RowSpec Make(int64_t rows, int64_t unit_rows) {
    return RowSpec{rows, unit_rows, rows / unit_rows};
  }
};

// Rows of a group whose size entry is `size`, before the clamp to what is
// left of the example: min(max(size, 0) * U, R) without overflow. The group
// starts are start_g = min(R, sum_{h<g} ClampedRows(h)), which equals
// grouped::GroupStarts (start_{g+1} = min(start_g + size_g * U, R)).
__device__ __forceinline__ int64_t ClampedRows(int32_t size,
                                               const RowSpec& rs) {
  if (size <= 0) return 0;
  if (static_cast<int64_t>(size) > rs.max_size) return rs.rows;
  return static_cast<int64_t>(size) * rs.unit_rows;
}

// Warp-wide inclusive prefix sum (every lane of the warp must call it).
template <typename T>
__device__ __forceinline__ T WarpInclusive(T v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int s = 1; s < 32; s *= 2) {
    const T other = __shfl_up_sync(0xFFFFFFFFu, v, s);
    if (lane >= s) v += other;
  }
  return v;
}

// Block-wide exclusive prefix sum of one int64 per thread (every thread of
// the kThreads-thread CTA must call it); *total = the sum over the CTA.
// `warp_sums` (kWarps entries of shared memory) is free again on return.
__device__ __forceinline__ int64_t BlockExclusiveScan(int64_t value,
                                                      int64_t* total,
                                                      int64_t* warp_sums) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  int64_t inclusive = value;
#pragma unroll
  for (int s = 1; s < 32; s *= 2) {
    const int64_t other = __shfl_up_sync(0xFFFFFFFFu, inclusive, s);
    if (lane >= s) inclusive += other;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  int64_t before = 0;
  int64_t sum = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const int64_t s = warp_sums[w];
    before += w < warp ? s : 0;
    sum += s;
  }
  __syncthreads();
  *total = sum;
  return before + inclusive - value;
}

// Block-wide sum (every thread must call it).
__device__ __forceinline__ int64_t BlockSum(int64_t value, int64_t* warp_sums) {
  int64_t total;
  BlockExclusiveScan(value, &total, warp_sums);
  return total;
}

// start_G: the first row of an example that belongs to no group.
__device__ __forceinline__ int64_t GroupsEnd(const int32_t* sizes,
                                             int64_t groups, const RowSpec& rs,
                                             int64_t* warp_sums) {
  int64_t sum = 0;
  for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
    sum += ClampedRows(sizes[g], rs);
  }
  return min(rs.rows, BlockSum(sum, warp_sums));
}

// Group g's [start, start + rows) (every thread must call it).
__device__ __forceinline__ void GroupSpan(const int32_t* sizes, int64_t g,
                                          const RowSpec& rs,
                                          int64_t* warp_sums, int64_t* start,
                                          int64_t* count) {
  int64_t before = 0;
  for (int64_t h = threadIdx.x; h < g; h += kThreads) {
    before += ClampedRows(sizes[h], rs);
  }
  before = BlockSum(before, warp_sums);
  *start = min(rs.rows, before);
  *count = min(rs.rows, before + ClampedRows(sizes[g], rs)) - *start;
}

// Rows of a unit of the swizzled scale layout (one cuBLAS 128 x 4 tile high):
// the units of the whole-tile kernels (grouped/mxfp8_row_cuda.cuh,
// grouped/mxfp8_unit_cuda.cuh), aligned at each group's start.
constexpr int kScaleUnitRows = 128;

// A unit's group (the same in every lane).
struct UnitGroup {
  int32_t start = 0;   // first row of the group
  int32_t count = 0;   // its rows
  uint32_t first = 0;  // its first unit
  int32_t end = 0;     // start_G: the first row of no group
  int64_t group = -1;  // its index (if found)
  bool found = false;  // unit < the units of all groups
};

// One warp-level pass over the group sizes (32 per step; every lane of the
// warp must call it) in 32-bit arithmetic: R < 2^25, so a step's sums
// (<= 33 R) fit. While the sizes so far sum to at most R (the usual case)
// the row and unit scans are independent and run interleaved.
__device__ __forceinline__ UnitGroup LocateUnit(const int32_t* sizes,
                                                int64_t G, const RowSpec& rs,
                                                uint32_t unit) {
  const int lane = threadIdx.x % 32;
  const int32_t R = static_cast<int32_t>(rs.rows);
  UnitGroup out;
  int32_t carry_rows = 0;
  uint32_t carry_units = 0;
  for (int64_t base = 0; base < G; base += 32) {
    const int64_t g = base + lane;
    const int32_t term = static_cast<int32_t>(
        g < G ? ClampedRows(__ldg(sizes + g), rs) : 0);  // <= R
    const int32_t incl = WarpInclusive(term);
    const int32_t step_rows = __shfl_sync(0xFFFFFFFFu, incl, 31);
    int32_t count = term;
    if (carry_rows + step_rows > R) {  // warp-uniform: clamped at R
      const int32_t start = min(R, carry_rows + incl - term);
      count = min(R, carry_rows + incl) - start;
    }
    const uint32_t units = static_cast<uint32_t>(count + kScaleUnitRows - 1) /
                           static_cast<uint32_t>(kScaleUnitRows);
    const uint32_t units_incl = WarpInclusive(units);
    const uint32_t first = carry_units + units_incl - units;
    const unsigned hit =
        __ballot_sync(0xFFFFFFFFu, unit >= first && unit - first < units);
    if (hit != 0) {  // one lane of one step at most
      const int src = __ffs(hit) - 1;
      const int32_t before = __shfl_sync(0xFFFFFFFFu, incl - term, src);
      out.start = min(R, carry_rows + before);
      out.count = __shfl_sync(0xFFFFFFFFu, count, src);
      out.first = __shfl_sync(0xFFFFFFFFu, first, src);
      out.group = base + src;
      out.found = true;
    }
    carry_rows = min(R, carry_rows + step_rows);
    carry_units += __shfl_sync(0xFFFFFFFFu, units_incl, 31);
  }
  out.end = carry_rows;
  return out;
}

// The group row tile a unit stands for.
struct GroupTile {
  int64_t group;       // -1: the unit is past the last group tile
  int64_t start;       // the group's first row
  int64_t rows;        // the group's rows
  int64_t tile;        // the tile's index within the group
  int64_t row_region;  // O_g of the rowwise scale buffer (if asked for)
  int64_t col_region;  // O_g of the colwise scale buffer (if asked for)
};

struct LocateShared {
  int64_t warp_sums[kWarps];
  GroupTile found;
};

// Which scale regions a Locate call also computes (block B = `block`).
struct RegionSpec {
  bool rowwise = false;
  bool colwise = false;
  int64_t block = 1;
};

// Finds the group tile of `unit` (unit-th row tile of kTileRows rows, group
// after group) in one pass over the groups, kThreads at a time; every thread
// of the CTA calls it and reads the result from `sh.found`. The prefix sums
// (rows, tiles, region bytes) are int64.
template <int kTileRows>
__device__ void LocateTile(const int32_t* sizes, int64_t groups,
                           const RowSpec& rs, int64_t cols,
                           const RegionSpec& regions, int64_t unit,
                           LocateShared& sh) {
  using grouped::GroupScaleRegion;
  using grouped::ScalePart;
  const int64_t rows = rs.rows;
  __syncthreads();  // the previous readers of sh.found are done
  if (threadIdx.x == 0) sh.found.group = -1;
  int64_t carry_rows = 0;
  int64_t carry_tiles = 0;
  int64_t carry_row_bytes = 0;
  int64_t carry_col_bytes = 0;
  for (int64_t base = 0; base < groups; base += kThreads) {
    const int64_t g = base + threadIdx.x;
    const int64_t term =
        g < groups ? ClampedRows(sizes[g], rs) : 0;
    int64_t total;
    const int64_t before = BlockExclusiveScan(term, &total, sh.warp_sums);
    const int64_t start = min(rows, carry_rows + before);
    const int64_t count = min(rows, carry_rows + before + term) - start;
    carry_rows = min(rows, carry_rows + total);  // no overflow, same starts
    const int64_t tiles = grouped::CeilDiv(count, kTileRows);
    const int64_t first_tile =
        carry_tiles + BlockExclusiveScan(tiles, &total, sh.warp_sums);
    carry_tiles += total;
    int64_t row_region = 0;
    int64_t col_region = 0;
    if (regions.rowwise) {  // uniform
      const int64_t bytes =
          GroupScaleRegion(ScalePart::kRowwise, count, cols, regions.block)
              .bytes();
      row_region =
          carry_row_bytes + BlockExclusiveScan(bytes, &total, sh.warp_sums);
      carry_row_bytes += total;
    }
    if (regions.colwise) {
      const int64_t bytes =
          GroupScaleRegion(ScalePart::kColwise, count, cols, regions.block)
              .bytes();
      col_region =
          carry_col_bytes + BlockExclusiveScan(bytes, &total, sh.warp_sums);
      carry_col_bytes += total;
    }
    if (g < groups && unit >= first_tile && unit < first_tile + tiles) {
      sh.found = GroupTile{g,    start,      count,
                           unit - first_tile, row_region, col_region};
    }
    __syncthreads();
    if (sh.found.group >= 0) break;  // the same in the whole CTA
  }
}

// Zeroes rows [first, last) x columns [col0, col0 + width) of a row-major
// byte matrix with `cols` columns (the CTA's share of a tail unit, width <=
// kTileCols, a divisor of kThreads).
template <int kTileCols>
__device__ __forceinline__ void ZeroRows(uint8_t* out, int64_t cols,
                                         int64_t first, int64_t last,
                                         int64_t col0, int64_t width) {
  static_assert(kThreads % kTileCols == 0, "whole rows per pass");
  const int c = threadIdx.x % kTileCols;
  if (c >= width) return;
  for (int64_t r = first + threadIdx.x / kTileCols; r < last;
       r += kThreads / kTileCols) {
    out[r * cols + col0 + c] = 0;
  }
}

// ---------------------------------------------------------------------------
// Host side.

// The units of the whole-tile kernels (the MXFP8 and NVFP4 RowOctetKernels,
// UnitTileKernel): W = WorstCaseUnits(R, G, 128), the units of a scale buffer
// of tiles_per_row = ceil(N / (4 B)) tiles each for blocks of B elements
// (W * tiles_per_row * 512 bytes), and the units their grid covers,
// max(W, ceil(R / 128)) (tail units reach ceil(R / 128), which exceeds W
// only when G == 0).
struct WholeTileUnits {
  int64_t worst;
  int64_t grid;
  int64_t tiles_per_row;

  static WholeTileUnits Of(const GroupedView& v,
                           int64_t block = grouped::kMxfp8Block) {
    const int64_t worst =
        grouped::WorstCaseUnits(v.rows, v.groups, int64_t{kScaleUnitRows});
    return WholeTileUnits{
        worst,
        std::max(worst, grouped::CeilDiv(v.rows, int64_t{kScaleUnitRows})),
        grouped::CeilDiv(v.cols, grouped::kTileCols * block)};
  }
  int64_t ScaleBytes() const { return worst * tiles_per_row * 512; }
};

// Whether `ptr` is a multiple of `bytes` (a power of two).
inline bool Aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

inline GroupedLaunchStatus CheckLaunch(const char* what) {
  GroupedLaunchStatus status;
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    status.ok = false;
    status.cuda_error = static_cast<int>(error);
    status.what = what;
  }
  return status;
}

inline GroupedLaunchStatus Fail(cudaError_t error, const char* what) {
  GroupedLaunchStatus status;
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear it
    status.ok = false;
    status.cuda_error = static_cast<int>(error);
    status.what = what;
  }
  return status;
}

inline GroupedLaunchStatus Unsupported(const char* what) {
  GroupedLaunchStatus status;
  status.ok = false;
  status.what = what;
  return status;
}

// Zero-fills `bytes` bytes at `p` on `stream` (nothing if bytes == 0).
inline GroupedLaunchStatus ZeroFill(void* p, int64_t bytes,
                                    cudaStream_t stream, const char* what) {
  if (bytes <= 0 || p == nullptr) return GroupedLaunchStatus{};
  return Fail(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), stream), what);
}

// Zero-fills the block-scale buffers of a grouped MXFP8 / NVFP4 call (the
// padding of every region and the bytes after the last one are 0x00).
template <typename Problem, typename Buffers>
GroupedLaunchStatus ZeroScaleBuffers(const Problem& problem,
                                     const Buffers& buffers,
                                     cudaStream_t stream) {
  const int64_t batch = problem.view.batch;
  GroupedLaunchStatus status =
      ZeroFill(problem.rowwise ? buffers.row_scale : nullptr,
               batch * problem.row_scale_bytes, stream,
               "zero-filling row_scale (cudaMemsetAsync)");
  if (!status.ok) return status;
  return ZeroFill(problem.colwise ? buffers.col_scale : nullptr,
                  batch * problem.col_scale_bytes, stream,
                  "zero-filling col_scale (cudaMemsetAsync)");
}

// The grid of a row-tiled kernel with tiles of tile_rows x tile_cols:
// (units, min(col_tiles, 65535), min(batch, 65535)) with units =
// W(R, G, tile_rows) group units + ceil(R / tile_rows) tail units and
// col_tiles = ceil(N / tile_cols). Returns false if units >= 2^31.
inline bool TileGrid(int64_t rows, int64_t cols, int64_t groups,
                     int64_t tile_rows, int64_t tile_cols, int64_t batch,
                     int64_t* group_units, int64_t* col_tiles, dim3* grid) {
  *col_tiles = grouped::CeilDiv(cols, tile_cols);
  *group_units = grouped::WorstCaseUnits(rows, groups, tile_rows);
  const int64_t units = *group_units + grouped::CeilDiv(rows, tile_rows);
  if (units > int64_t{0x7FFFFFFF}) return false;
  *grid = dim3(static_cast<unsigned>(std::max<int64_t>(1, units)),
               static_cast<unsigned>(std::clamp<int64_t>(*col_tiles, 1, 65535)),
               static_cast<unsigned>(std::clamp<int64_t>(batch, 1, 65535)));
  return true;
}

}  // namespace eqx_quant::cuda::grouped_dev

namespace eqx_quant::cuda {

// The rowwise-only MXFP8 path (grouped/mxfp8_row_cuda.cu): launches
// RowOctetKernel if the problem suits it (*taken says whether); nothing is
// enqueued otherwise.
GroupedLaunchStatus TryMxfp8RowOctet(
    const GroupedMxfp8QuantizeProblem& problem,
    const GroupedMxfp8QuantizeBuffers& buffers, cudaStream_t stream,
    bool* taken);

// The rowwise-only NVFP4 path for 16-bit inputs without 2D scaling (with or
// without stochastic rounding; grouped/nvfp4_row_cuda.cu): launches its
// RowOctetKernel if the problem suits it (*taken says whether); nothing is
// enqueued otherwise.
GroupedLaunchStatus TryNvfp4RowOctet(
    const GroupedNvfp4QuantizeProblem& problem,
    const GroupedNvfp4QuantizeBuffers& buffers, cudaStream_t stream,
    bool* taken);

// The NVFP4 path with a colwise part (alone or with the rowwise part) for
// 16-bit inputs without 2D scaling (with or without stochastic rounding),
// N >= 512 and a
// grid of at least one wave (grouped/nvfp4_panel_cuda.cu): whether
// its GroupedPanelKernel takes `problem`, and its launch (after the scale
// buffers' memset).
bool Nvfp4PanelsApply(const GroupedNvfp4QuantizeProblem& problem,
                      const GroupedNvfp4QuantizeBuffers& buffers);
GroupedLaunchStatus LaunchNvfp4Panels(
    const GroupedNvfp4QuantizeProblem& problem,
    const GroupedNvfp4QuantizeBuffers& buffers, cudaStream_t stream);

// The colwise and rowwise + colwise MXFP8 path (grouped/mxfp8_unit_cuda.cu):
// launches UnitTileKernel if the problem suits it (*taken says whether);
// nothing is enqueued otherwise.
GroupedLaunchStatus TryMxfp8UnitTile(
    const GroupedMxfp8QuantizeProblem& problem,
    const GroupedMxfp8QuantizeBuffers& buffers, cudaStream_t stream,
    bool* taken);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_GROUPED_DEVICE_CUDA_CUH_
