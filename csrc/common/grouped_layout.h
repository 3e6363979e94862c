// The layout arithmetic of the grouped (MoE) ops (docs/grouped.md): group
// offsets from the device-side group sizes, the per-group padded, swizzled
// block-scale regions and the static worst-case length of a scale buffer.
//
// Plain integer arithmetic on raw pointers, no allocation and no library
// calls: the same header serves the CPU kernels and (through
// EQX_QUANT_HOST_DEVICE) CUDA device code.

#ifndef EQX_QUANT_CSRC_COMMON_GROUPED_LAYOUT_H_
#define EQX_QUANT_CSRC_COMMON_GROUPED_LAYOUT_H_

#include <cstdint>

#include "common/host_device.h"

namespace eqx_quant {
namespace grouped {

// Block sizes of the block formats (elements per scale).
inline constexpr int64_t kMxfp8Block = 32;
inline constexpr int64_t kNvfp4Block = 16;

// cuBLAS's scale tile: 128 rows x 4 columns, 512 bytes.
inline constexpr int64_t kTileRows = 128;
inline constexpr int64_t kTileCols = 4;

// ceil(a / b) for a >= 0, b > 0.
EQX_QUANT_HOST_DEVICE constexpr int64_t CeilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
// a rounded up to a multiple of m (a >= 0, m > 0).
EQX_QUANT_HOST_DEVICE constexpr int64_t PadTo(int64_t a, int64_t m) {
  return CeilDiv(a, m) * m;
}

// Rows of the group whose size entry is `size`, starting at row `start` of an
// example of `rows` rows: min(max(size, 0) * rows_per_unit, rows - start),
// computed without overflow (0 <= start <= rows, rows_per_unit >= 1).
EQX_QUANT_HOST_DEVICE inline int64_t GroupRows(int32_t size,
                                               int64_t rows_per_unit,
                                               int64_t start, int64_t rows) {
  const int64_t remaining = rows - start;
  if (size <= 0 || remaining <= 0) return 0;
  // size <= remaining / U  <=>  size * U <= remaining (no overflow then).
  if (static_cast<int64_t>(size) > remaining / rows_per_unit) return remaining;
  return static_cast<int64_t>(size) * rows_per_unit;
}

// starts[0..groups]: starts[g] = first row of group g, starts[groups] = the
// end of the last group (rows from there on belong to no group). Group g has
// starts[g + 1] - starts[g] rows.
EQX_QUANT_HOST_DEVICE inline void GroupStarts(const int32_t* sizes,
                                              int64_t groups,
                                              int64_t rows_per_unit,
                                              int64_t rows, int64_t* starts) {
  int64_t start = 0;
  for (int64_t g = 0; g < groups; ++g) {
    starts[g] = start;
    start += GroupRows(sizes[g], rows_per_unit, start, rows);
  }
  starts[groups] = start;
}

// W(R, G, u): the largest sum_g ceil(rows_g / u) over G groups whose sizes
// sum to at most R (G >= 1, u >= 1): 0 if R == 0, else
// k - 1 + ceil((R - k + 1) / u) with k = min(G, R).
EQX_QUANT_HOST_DEVICE constexpr int64_t WorstCaseUnits(int64_t rows,
                                                       int64_t groups,
                                                       int64_t unit) {
  if (rows <= 0) return 0;
  const int64_t k = groups < rows ? groups : rows;
  return k - 1 + CeilDiv(rows - k + 1, unit);
}

// Which scale matrix T_g of a group a scale buffer holds.
enum class ScalePart {
  kRowwise,  // the rows' scales: (rows_g, ceil(N/B))
  kColwise,  // the columns' scales, stored T: (N, ceil(rows_g/B))
};

// The shape of T_g and of its padded region (P_g, Q_g).
struct ScaleRegion {
  int64_t rows = 0;         // of T_g
  int64_t cols = 0;         // of T_g
  int64_t padded_rows = 0;  // P_g = pad128(rows)
  int64_t padded_cols = 0;  // Q_g = pad4(cols)
  EQX_QUANT_HOST_DEVICE constexpr int64_t bytes() const {
    return padded_rows * padded_cols;
  }
};

// T_g's region for a group of `group_rows` rows of `cols` columns, block B.
EQX_QUANT_HOST_DEVICE inline ScaleRegion GroupScaleRegion(ScalePart part,
                                                          int64_t group_rows,
                                                          int64_t cols,
                                                          int64_t block) {
  ScaleRegion region;
  if (part == ScalePart::kRowwise) {
    region.rows = group_rows;
    region.cols = CeilDiv(cols, block);
  } else {
    region.rows = cols;
    region.cols = CeilDiv(group_rows, block);
  }
  region.padded_rows = PadTo(region.rows, kTileRows);
  region.padded_cols = PadTo(region.cols, kTileCols);
  return region;
}

// Byte offset of element (i, j) of a padded region with Q = padded_cols
// columns, in cuBLAS's 128x4 tile order:
//   ((i / 128) * (Q / 4) + j / 4) * 512 + (i % 32) * 16 + ((i % 128) / 32) * 4
//   + j % 4.
EQX_QUANT_HOST_DEVICE constexpr int64_t SwizzleOffset(int64_t i, int64_t j,
                                                      int64_t padded_cols) {
  return ((i / kTileRows) * (padded_cols / kTileCols) + j / kTileCols) *
             (kTileRows * kTileCols) +
         (i % 32) * 16 + ((i % kTileRows) / 32) * 4 + j % kTileCols;
}

// SwizzleOffset in 32-bit arithmetic (shifts and masks, no 64-bit multiply
// or division) for device code whose whole scale buffer is < 2^32 bytes: then
// i, j, padded_cols and the result all fit, and the result equals
// SwizzleOffset's.
EQX_QUANT_HOST_DEVICE constexpr uint32_t SwizzleOffset32(uint32_t i, uint32_t j,
                                                         uint32_t padded_cols) {
  return ((i >> 7) * (padded_cols >> 2) + (j >> 2)) * 512u + (i & 31u) * 16u +
         ((i >> 5) & 3u) * 4u + (j & 3u);
}
static_assert(kTileRows == 128 && kTileCols == 4,
              "SwizzleOffset32 hard-codes the 128x4 tile");

// The static length of a scale buffer: the largest total of the regions that
// any group sizes can need (docs/grouped.md, "Block scales"):
//   rowwise: 128 * pad4(ceil(N/B)) * W(R, G, 128)
//   colwise: pad128(N) * 4 * W(R, G, 4B)
EQX_QUANT_HOST_DEVICE constexpr int64_t ScaleBufferBytes(ScalePart part,
                                                         int64_t rows,
                                                         int64_t cols,
                                                         int64_t groups,
                                                         int64_t block) {
  return part == ScalePart::kRowwise
             ? kTileRows * PadTo(CeilDiv(cols, block), kTileCols) *
                   WorstCaseUnits(rows, groups, kTileRows)
             : PadTo(cols, kTileRows) * kTileCols *
                   WorstCaseUnits(rows, groups, kTileCols * block);
}

// O_g for every group: offsets[g] = sum_{h<g} P_h * Q_h, offsets[groups] =
// the total (<= ScaleBufferBytes for starts from GroupStarts).
EQX_QUANT_HOST_DEVICE inline void ScaleRegionOffsets(ScalePart part,
                                                     const int64_t* starts,
                                                     int64_t groups,
                                                     int64_t cols,
                                                     int64_t block,
                                                     int64_t* offsets) {
  int64_t offset = 0;
  for (int64_t g = 0; g < groups; ++g) {
    offsets[g] = offset;
    offset +=
        GroupScaleRegion(part, starts[g + 1] - starts[g], cols, block).bytes();
  }
  offsets[groups] = offset;
}

// Writes T (row-major, region.rows x region.cols, row stride `t_stride`, or
// its transpose if `transposed`: then T[i][j] = src[j * t_stride + i]) into
// the region at `dst` (the region's padding bytes are left untouched).
EQX_QUANT_HOST_DEVICE inline void ScatterToRegion(const uint8_t* src,
                                                  int64_t t_stride,
                                                  bool transposed,
                                                  const ScaleRegion& region,
                                                  uint8_t* dst) {
  for (int64_t i = 0; i < region.rows; ++i) {
    for (int64_t j = 0; j < region.cols; ++j) {
      const uint8_t value =
          transposed ? src[j * t_stride + i] : src[i * t_stride + j];
      dst[SwizzleOffset(i, j, region.padded_cols)] = value;
    }
  }
}

}  // namespace grouped
}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_GROUPED_LAYOUT_H_
