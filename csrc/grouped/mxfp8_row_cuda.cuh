// The rowwise-only path of eqx_quant_grouped_mxfp8_quantize (sm_90a),
// included by grouped/mxfp8_row_cuda.cu only (its launcher). Same bytes as the
// generic TileKernel there (and so as the CPU kernel); taken when N % kVec
// == 0 (kVec = elements per 16 bytes: 8 for bf16 / f16, 4 for f32), x is
// 16-byte aligned, the data output 8-byte (f32: 4) and the scale buffer
// 16-byte aligned, the scale buffer is exactly its worst-case length
// (common/grouped_layout.h: ScaleBufferBytes) and R < 2^25.
//
// Whole sectors of scales. In cuBLAS's swizzled layout a 32-byte sector of a
// group's scale region holds the 4 blocks of one 128-column tile for the 8
// group rows i, i + 1, i + 32, i + 33, i + 64, i + 65, i + 96, i + 97 (i even,
// i % 128 < 32). RowOctetKernel gives a CTA exactly such a row octet of a
// 128-row unit (aligned at its group's start), over kChunkCols columns: warp
// q (0..7) owns row i + (q & 1) + 32 * (q >> 1) and reads kChunkCols
// contiguous elements of it (4 x 512 bytes in flight per warp), so the CTA
// streams 16 KiB like the dense MXFP8 RowStreamKernel and its scale bytes are
// kChunkCols / 128 whole sectors, staged in shared memory and written after
// one barrier by 16-byte streaming stores (partial-sector scale stores slow
// the stream down, as in the dense kernels).
//
// Items: item = (unit * 16 + octet) * chunks + column chunk over units
// [0, max(W, ceil(R / 128))), W = WorstCaseUnits(R, G, 128), the units of the
// scale buffer. Group g's region starts at its first unit (first_g *
// tiles_per_row tiles in, tiles_per_row = ceil(N / 128)), so the tile of
// (unit, column tile) is unit * tiles_per_row + column tile whatever the
// group: units past the groups' units but below W write zero sectors (the
// buffer's slack), and the kernel writes every scale byte itself (no
// memset). Independently, an item zeroes its octet of tail unit `unit` (rows
// start_G + 128 * unit ...) where those rows exist: rows of no group.
//
// Every CTA finds its unit's group itself: one warp-level pass over the
// group sizes, 32 per step, in every warp (no barrier before the loads).
//
// Short CTAs of 4 loads per thread, 8 per SM, stream best, as for the dense
// kernels (rather than a CTA per whole 128x128 tile, longer octets or a warp
// per tile column of the octet).

#ifndef EQX_QUANT_CSRC_GROUPED_MXFP8_ROW_CUDA_CUH_
#define EQX_QUANT_CSRC_GROUPED_MXFP8_ROW_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/e8m0.h"
#include "cuda/fp8_convert.cuh"
#include "grouped/device_cuda.cuh"
#include "grouped/row_octet_cuda.cuh"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda::grouped_row {

using grouped_dev::kThreads;
using grouped_dev::LocateUnit;
using grouped_dev::UnitGroup;

constexpr int kBlock = 32;
constexpr int kTileCols = 128;    // columns of one scale tile (4 blocks)
constexpr int kLoads = 4;         // 16-byte loads in flight per thread

// Columns of an item: kLoads warp-wide 16-byte loads per row.
template <typename In>
constexpr int kChunkCols = kLoads * 32 * In::kVec;  // 1024 (16-bit), 512

template <typename In, Fp8Format kFormat>
__global__ void __launch_bounds__(kThreads, 8)
    RowOctetKernel(const __grid_constant__ RowParams p) {
  constexpr int kVec = In::kVec;
  constexpr int kLanesPerBlock = kBlock / kVec;        // 4 or 8
  constexpr int kChunk = kChunkCols<In>;
  constexpr int kChunkTiles = kChunk / kTileCols;      // 8 or 4
  constexpr int kWordsOut = kVec / 4;
  using Storage = typename In::Storage;
  __shared__ __align__(16) uint8_t sectors[kChunkTiles][kSectorBytes];

  const int lane = threadIdx.x % 32;
  const int q = threadIdx.x / 32;  // the warp's row of the octet
  const int64_t N = p.cols;
  const int64_t R = p.rs.rows;
  const int64_t ex = blockIdx.y;
  const OctetItem it = OctetItemOf(blockIdx.x, p.chunks);
  const uint32_t chunk = it.chunk;
  const uint32_t unit = it.unit;
  const int local_row = it.local_row;
  const int64_t col0 = int64_t{chunk} * kChunk + lane * kVec;
  uint8_t* const row_out = p.row + ex * R * N;
  uint8_t* const scales = OctetSectors(p, ex, it);
  const uint32_t tile0 = chunk * kChunkTiles;  // first column tile

  const UnitGroup where =
      LocateUnit(p.group_sizes + ex * p.groups, p.groups, p.rs, unit);

  if (where.found) {  // CTA-uniform
    const int64_t local0 = int64_t{unit - where.first} * kUnitRows;
    const bool row_ok = local0 + local_row < where.count;
    const int64_t row = where.start + local0 + local_row;
    const Storage* x =
        static_cast<const Storage*>(p.x) + (ex * R + row) * N + col0;
    uint8_t* const out = row_out + row * N + col0;
    uint4 raw[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const bool ok = row_ok && col0 + u * 32 * kVec < N;
      raw[u] = ok ? LoadStreaming(x + u * 32 * kVec) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
      uint32_t key = mxfp8::VectorKey<In>(w);
#pragma unroll
      for (int d = 1; d < kLanesPerBlock; d *= 2) {
        key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, d));
      }
      const uint32_t e = mxfp8::BlockScale<kFormat>(In::KeyToFloat(key));
      // N % kVec == 0: a block's first vector is in range iff the block is.
      const bool ok = row_ok && col0 + u * 32 * kVec < N;
      if (ok) {
        const float factor = mxfp8::BlockFactor(e);
        uint32_t q8[kWordsOut];
        mxfp8::QuantizeVector<In, kFormat, true>(w, &factor, q8);
        StoreCastWords(out + u * 32 * kVec, q8);
      }
      if (lane % kLanesPerBlock == 0) {  // padding rows / blocks: 0
        const int block = (u * 32 + lane) / kLanesPerBlock;  // in the chunk
        sectors[block / 4][SectorByte(q, block)] = ok ? e : 0;
      }
    }
    __syncthreads();  // the sectors are in
    // Sector t, half h on thread 2t + h (tiles past the row's last: none).
    const int t = threadIdx.x / 2;
    if (t < kChunkTiles && tile0 + t < p.tiles_per_row) {
      const int h = threadIdx.x % 2;
      StoreStreaming16(scales + int64_t{tile0 + t} * kTileBytes + 16 * h,
                       *reinterpret_cast<const uint4*>(&sectors[t][16 * h]));
    }
  } else if (unit < p.worst_units) {  // the buffer's slack
    const int t = threadIdx.x / 2;
    if (t < kChunkTiles && tile0 + t < p.tiles_per_row) {
      StoreStreaming16(
          scales + int64_t{tile0 + t} * kTileBytes + 16 * (threadIdx.x % 2),
          make_uint4(0, 0, 0, 0));
    }
  }

  // Tail unit `unit`: this octet's rows of no group, zeroed.
  const int64_t tail_row = where.end + int64_t{unit} * kUnitRows + local_row;
  if (tail_row < R) {
    const uint32_t zero[kWordsOut] = {};
    uint8_t* const out = row_out + tail_row * N + col0;
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if (col0 + u * 32 * kVec < N) StoreCastWords(out + u * 32 * kVec, zero);
    }
  }
}

}  // namespace eqx_quant::cuda::grouped_row

#endif  // EQX_QUANT_CSRC_GROUPED_MXFP8_ROW_CUDA_CUH_
