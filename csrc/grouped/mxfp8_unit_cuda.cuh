// The colwise path of eqx_quant_grouped_mxfp8_quantize (sm_90a: colwise, and
// rowwise + colwise in one pass), included by grouped/mxfp8_unit_cuda.cu
// only (its launcher). Same bytes as the generic TileKernel in
// grouped/quantize_cuda.cu (and so as the CPU kernel); taken when N % kVec
// == 0 (kVec = elements per 16 bytes: 8 for bf16 / f16, 4 for f32), x is
// 16-byte aligned, the data outputs 8-byte aligned, the scale buffers 16-byte
// aligned and exactly their worst-case length (common/grouped_layout.h:
// ScaleBufferBytes), R < 2^25.
//
// Whole scale tiles. In cuBLAS's swizzled layout the colwise scales of a
// 128-column tile over a group's 128-row unit (4 blocks of 32 rows) are one
// contiguous 512-byte tile, and so are the rowwise scales of the unit's 128
// rows over those columns. UnitTileKernel gives a CTA one unit x kItemCols =
// 32 * kVec columns (256 for 16-bit inputs: two scale tiles each way; 128 for
// f32: one) and walks the unit as up to 4 slabs of 32 rows, one colwise block
// each, through a cp.async double buffer: warp w owns slab rows w, w+8, w+16,
// w+24, one 16-byte vector per lane and row (16 KiB of input per slab), the
// next slab's copies in flight while the current one is processed. Per slab
// the data path is the dense MXFP8 TileKernel's (mxfp8/tile_cuda.cuh):
//   rowwise: a block is 32 / kVec consecutive lanes (shuffle max), the FP8
//     bytes staged in the warp's consumed slots and written with 16-byte
//     streaming stores ("wide": N % 16 == 0 and 16-byte aligned outputs;
//     else 8- / 4-byte stores from registers);
//   colwise: column maxima through shared memory, then the bytes as above.
// Scale bytes go to the CTA's tiles in shared memory (zeroed first, so that
// padding rows, padding blocks and columns past N stay 0); after the last
// slab the tiles leave as 16-byte streaming stores, every sector whole.
//
// Grid: x = unit * col_ctas + column piece over units [0, max(W,
// ceil(R / 128))), W = WorstCaseUnits(R, G, 128) = the units of each scale
// buffer; y = example. Group g's regions both start at its first unit (first_g
// * tiles_per_row tiles), rowwise tile (unit, t) at unit * tiles_per_row + t,
// colwise tile (t, u) of the group at first_g * tiles_per_row + t * units_g +
// u. Units past the groups' but below W write zero tiles (the buffers'
// slack), so no memset runs before the kernel. Independently, a CTA zeroes
// its columns of tail unit `unit` (rows start_G + 128 * unit ...) where those
// rows exist: rows of no group. Whole scale tiles, rather than scale bytes
// written straight to global memory one by one, avoid partial-sector
// writes.

#ifndef EQX_QUANT_CSRC_GROUPED_MXFP8_UNIT_CUDA_CUH_
#define EQX_QUANT_CSRC_GROUPED_MXFP8_UNIT_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/e8m0.h"
#include "cuda/cp_async.cuh"
#include "cuda/fp8_convert.cuh"
#include "grouped/device_cuda.cuh"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda::grouped_unit {

using grouped_dev::kScaleUnitRows;
using grouped_dev::kThreads;
using grouped_dev::kWarps;
using grouped_dev::LocateUnit;
using grouped_dev::RowSpec;
using grouped_dev::UnitGroup;

constexpr int kBlock = 32;
constexpr int kSlabs = kScaleUnitRows / kBlock;     // 4
constexpr int kRowsPerThread = kBlock / kWarps;     // 4 rows of a slab
constexpr int kTileCols = 128;                      // of one scale tile
constexpr int kTileBytes = 512;                     // one 128 x 4 tile
constexpr int kMinBlocks = 4;                       // CTAs per SM

struct UnitParams {
  const void* x;
  const int32_t* group_sizes;
  uint8_t* row;        // null: colwise only
  uint8_t* row_scale;  // null: colwise only
  uint8_t* col;
  uint8_t* col_scale;
  RowSpec rs;
  int64_t cols;        // N
  int64_t groups;
  int64_t scale_bytes;     // per example, either buffer: W * tiles_per_row * 512
  uint32_t col_ctas;       // ceil(N / kItemCols)
  uint32_t tiles_per_row;  // ceil(N / 128)
  uint32_t worst_units;    // W(R, G, 128)
  bool wide;  // N % 16 == 0 and 16-byte aligned data outputs: staged stores
};

template <typename In, Fp8Format kFormat, bool kRow>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    UnitTileKernel(const __grid_constant__ UnitParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;
  constexpr int kItemCols = 32 * kVec;                 // 256 or 128
  constexpr int kItemTiles = kItemCols / kTileCols;    // 2 or 1
  constexpr int kLanesPerBlock = kBlock / kVec;        // 4 or 8
  constexpr int kOutWords = kVec / 4;
  constexpr int kStageBytes = kRowsPerThread * kItemCols;  // per warp
  constexpr int kTileSets = kRow ? 2 : 1;  // [0]: colwise, [1]: rowwise
  static_assert(kStageBytes % 512 == 0, "whole warp stores");
  __shared__ __align__(16) uint32_t buf[2][kWarps][kRowsPerThread][32][4];
  __shared__ __align__(16) uint32_t part[kWarps][32 * 4];
  __shared__ __align__(16) float factors[kItemCols];
  __shared__ __align__(16) uint8_t tiles[kTileSets][kItemTiles][kTileBytes];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t N = p.cols;
  const int64_t R = p.rs.rows;
  const int64_t ex = blockIdx.y;
  const uint32_t unit = blockIdx.x / p.col_ctas;
  const uint32_t piece = blockIdx.x - unit * p.col_ctas;
  const int64_t col0 = int64_t{piece} * kItemCols;
  const int64_t my_col = col0 + lane * kVec;
  const bool col_ok = my_col < N;
  const uint32_t tile0 = piece * kItemTiles;  // first column tile
  const int64_t row_blocks = (N + kBlock - 1) / kBlock;
  const Storage* const x = static_cast<const Storage*>(p.x) + ex * R * N;
  uint8_t* const row_out = kRow ? p.row + ex * R * N : nullptr;
  uint8_t* const col_out = p.col + ex * R * N;
  uint8_t* const row_scales =
      kRow ? p.row_scale + ex * p.scale_bytes : nullptr;
  uint8_t* const col_scales = p.col_scale + ex * p.scale_bytes;

  const UnitGroup where =
      LocateUnit(p.group_sizes + ex * p.groups, p.groups, p.rs, unit);

  // This thread's 16 bytes of tile (set, t), t = 0..kItemTiles-1: thread i
  // stores piece i % 32 of tile i / 32 (tiles past the row's last: none).
  const int my_tile = threadIdx.x / 32;  // in [0, kTileSets * kItemTiles)
  const int my_set = my_tile / kItemTiles;
  const int my_t = my_tile % kItemTiles;
  const bool my_store = my_tile < kTileSets * kItemTiles &&
                        tile0 + my_t < p.tiles_per_row;

  if (where.found) {  // CTA-uniform
    const int64_t local0 = int64_t{unit - where.first} * kScaleUnitRows;
    const int unit_rows =
        static_cast<int>(min(int64_t{kScaleUnitRows}, where.count - local0));
    const int slabs = (unit_rows + kBlock - 1) / kBlock;  // 1..4
    const int64_t row0 = where.start + local0;

    // Zero the staged tiles (padding stays 0), before any slab writes them.
    for (int i = threadIdx.x; i < kTileSets * kItemTiles * kTileBytes / 16;
         i += kThreads) {
      reinterpret_cast<uint4*>(&tiles[0][0][0])[i] = make_uint4(0, 0, 0, 0);
    }

    auto fetch = [&](int s, int b) {
      const int rows = unit_rows - s * kBlock;
#pragma unroll
      for (int u = 0; u < kRowsPerThread; ++u) {
        const int r = warp + kWarps * u;
        const bool valid = r < rows && col_ok;
        AsyncCopy16(buf[b][warp][u][lane],
                    valid ? x + (row0 + s * kBlock + r) * N + my_col : x,
                    valid);
      }
    };

    fetch(0, 0);
    AsyncCommit();
    __syncthreads();  // the zeroed tiles
    for (int s = 0; s < slabs; ++s) {
      const int cur = s & 1;
      if (s + 1 < slabs) fetch(s + 1, cur ^ 1);
      AsyncCommit();
      AsyncWaitGroup<1>();  // this thread's slots of slab s are in
      const int rows = unit_rows - s * kBlock;  // of this slab (<= 32 used)
      const int64_t slab0 = row0 + s * kBlock;

      uint32_t w[kRowsPerThread][4];
      mxfp8::ReadSlotVectors(buf[cur][warp], lane, w);
      __syncwarp();  // the warp's slots are read: they become its stage
      uint8_t* const stage = reinterpret_cast<uint8_t*>(buf[cur][warp]);
      auto store = [&](uint8_t* out, int u, const uint32_t (&q)[kOutWords]) {
        if (p.wide) {
          StageCastWords(stage + u * kItemCols + lane * kVec, q);
          return;
        }
        const int r = warp + kWarps * u;
        if (r < rows && col_ok) StoreCastWords(out + (slab0 + r) * N + my_col, q);
      };
      // The staged rows -> 16-byte stores (a warp instruction writes 512
      // contiguous bytes of a row, or 4 rows of 128 bytes for f32).
      auto flush = [&](uint8_t* out) {
        if (!p.wide) return;
        __syncwarp();
#pragma unroll
        for (int chunk = 0; chunk < kStageBytes / 512; ++chunk) {
          const int byte = chunk * 512 + lane * 16;
          const int r = warp + kWarps * (byte / kItemCols);
          const int64_t col = col0 + byte % kItemCols;
          if (r < rows && col < N) {
            StoreStreaming16(out + (slab0 + r) * N + col,
                             *reinterpret_cast<const uint4*>(stage + byte));
          }
        }
        __syncwarp();
      };

      // The rowwise block keys and this thread's part of the column maxima.
      uint32_t row_keys[kRowsPerThread];
      *reinterpret_cast<uint4*>(&part[warp][lane * 4]) =
          mxfp8::TileKeys<In, kRowsPerThread>(w, row_keys);

      if constexpr (kRow) {
#pragma unroll
        for (int u = 0; u < kRowsPerThread; ++u) {
          uint32_t key = row_keys[u];
#pragma unroll
          for (int d = 1; d < kLanesPerBlock; d *= 2) {
            key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, d));
          }
          const uint32_t e = mxfp8::BlockScale<kFormat>(In::KeyToFloat(key));
          const float factor = mxfp8::BlockFactor(e);
          uint32_t q[kOutWords];
          mxfp8::QuantizeVector<In, kFormat, true>(w[u], &factor, q);
          store(row_out, u, q);
          // Four consecutive blocks make one word of a tile row: gathered
          // by shuffles; blocks past N are padding (0).
          const int block = lane / kLanesPerBlock;  // in the item
          const uint32_t byte =
              col0 / kBlock + block < row_blocks ? e : 0u;
          uint32_t word = byte;
#pragma unroll
          for (int k = 1; k < 4; ++k) {
            word |= __shfl_down_sync(0xFFFFFFFFu, byte, k * kLanesPerBlock)
                    << (8 * k);
          }
          const int r = warp + kWarps * u;
          if (lane % (4 * kLanesPerBlock) == 0 && r < rows) {
            // Row 32 s + r of the unit: tile row r, word s.
            *reinterpret_cast<uint32_t*>(
                &tiles[kTileSets - 1][block / 4][r * 16 + s * 4]) = word;
          }
        }
        flush(row_out);
      }

      __syncthreads();  // the partials are in
      {
        const int c = threadIdx.x;  // key word c
        if (c < 32 * 4) {
          uint32_t m = part[0][c];
#pragma unroll
          for (int v = 1; v < kWarps; ++v) {
            m = mxfp8::KeyMax<In>(m, part[v][c]);
          }
#pragma unroll
          for (int h = 0; h < In::kKeysPerWord; ++h) {
            const uint32_t key =
                In::kKeysPerWord == 2 ? (h ? m >> 16 : m & 0xFFFFu) : m;
            const uint32_t e = mxfp8::BlockScale<kFormat>(In::KeyToFloat(key));
            const int column = c * In::kKeysPerWord + h;
            factors[column] = mxfp8::BlockFactor(e);
            if (col0 + column < N) {
              // Column n of the tile: tile row n % 32, word (n / 32) % 4,
              // byte s (the unit's block s).
              const int n = column % kTileCols;
              tiles[0][column / kTileCols][(n % 32) * 16 + (n / 32) * 4 + s] =
                  e;
            }
          }
        }
      }
      __syncthreads();  // the factors are in
      float f[kVec];
      mxfp8::LoadColumnFactors<kVec>(&factors[lane * kVec], f);
#pragma unroll
      for (int u = 0; u < kRowsPerThread; ++u) {
        uint32_t q[kOutWords];
        mxfp8::QuantizeVector<In, kFormat, false>(w[u], f, q);
        store(col_out, u, q);
      }
      flush(col_out);
    }
    __syncthreads();  // every slab's scale bytes are in
    if (my_store) {
      const uint32_t t = tile0 + my_t;
      const uint32_t units = static_cast<uint32_t>(
          (where.count + kScaleUnitRows - 1) / kScaleUnitRows);
      const int64_t tile_index =
          my_set == 0 ? int64_t{where.first} * p.tiles_per_row +
                            int64_t{t} * units + (unit - where.first)
                      : int64_t{unit} * p.tiles_per_row + t;
      uint8_t* const base = my_set == 0 ? col_scales : row_scales;
      StoreStreaming16(base + tile_index * kTileBytes + lane * 16,
                       *reinterpret_cast<const uint4*>(
                           &tiles[my_set][my_t][lane * 16]));
    }
  } else if (unit < p.worst_units && my_store) {  // the buffers' slack
    uint8_t* const base = my_set == 0 ? col_scales : row_scales;
    StoreStreaming16(base + (int64_t{unit} * p.tiles_per_row + tile0 + my_t) *
                                kTileBytes +
                         lane * 16,
                     make_uint4(0, 0, 0, 0));
  }

  // Tail unit `unit`: its rows of no group, zeroed in this CTA's columns.
  const int64_t tail0 = where.end + int64_t{unit} * kScaleUnitRows;
  if (tail0 < R && col_ok) {
    const uint32_t zero[kOutWords] = {};
    for (int r = warp; r < kScaleUnitRows && tail0 + r < R; r += kWarps) {
      const int64_t at = (tail0 + r) * N + my_col;
      if constexpr (kRow) StoreCastWords(row_out + at, zero);
      StoreCastWords(col_out + at, zero);
    }
  }
}

}  // namespace eqx_quant::cuda::grouped_unit

#endif  // EQX_QUANT_CSRC_GROUPED_MXFP8_UNIT_CUDA_CUH_
