// 2D NVFP4 (16x16 tiles) for PanelKernel (nvfp4/panel_cuda.cu), 16-bit
// inputs without stochastic rounding: a thread's panel (16 rows x 8 columns)
// and its neighbour lane's (lane ^ 1) are one tile. Its key is the NaN-free
// max |v| of the 256 values (as the tile kernel's and the CPU kernel's), its
// scale byte the same for its 16 rows (rowwise) and its 16 columns (colwise);
// so, where the two parts share the tensor scale (no RHT in 2D; the global
// amaxes are equal unless the caller passed two), the colwise codes are the
// transposed rowwise ones: one encode serves both, and a nibble transpose
// makes the T layout's words.

#ifndef EQX_QUANT_CSRC_NVFP4_PANEL_2D_CUDA_CUH_
#define EQX_QUANT_CSRC_NVFP4_PANEL_2D_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "nvfp4/device_cuda.cuh"
#include "nvfp4/half_codes_cuda.cuh"
#include "nvfp4/math_cuda.cuh"
#include "nvfp4/panel_staging_cuda.cuh"

namespace eqx_quant::cuda::nvfp4 {

// The transpose of an 8x8 matrix of nibbles: m[i] holds row i (column c in
// nibble c) before, column c (row i in nibble i) after. 4x4 blocks (16-bit
// halves) swap between words i and i + 4, 2x2 blocks (bytes) between i and
// i + 2, single nibbles between i and i + 1.
__device__ __forceinline__ void TransposeNibbles8x8(uint32_t (&m)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t a = m[i];
    const uint32_t b = m[i + 4];
    m[i] = __byte_perm(a, b, 0x5410u);
    m[i + 4] = __byte_perm(a, b, 0x7632u);
  }
  constexpr int kPairs2[4] = {0, 1, 4, 5};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = kPairs2[k];
    const uint32_t a = m[i];
    const uint32_t b = m[i + 2];
    m[i] = __byte_perm(a, b, 0x6240u);
    m[i + 2] = __byte_perm(a, b, 0x7351u);
  }
#pragma unroll
  for (int i = 0; i < 8; i += 2) {
    const uint32_t a = m[i];
    const uint32_t b = m[i + 1];
    m[i] = (a & 0x0F0F0F0Fu) | ((b << 4) & 0xF0F0F0F0u);
    m[i + 1] = ((a >> 4) & 0x0F0F0F0Fu) | (b & 0xF0F0F0F0u);
  }
}

// The key of the tile of this lane's 16 rows (16 bytes each, kRowBytes
// apart from `rows`) and lane ^ 1's, which must call it too: the max over
// the halves' magnitude bits; where that is a NaN, the NaN-free max of the
// unpacked values. *tile_nan: the tile holds a NaN (the same in both lanes).
template <typename In, int kRowBytes>
__device__ __forceinline__ uint32_t TileKey(const uint8_t* rows,
                                            unsigned block_lanes,
                                            bool* tile_nan) {
  uint32_t m = 0;
#pragma unroll 4
  for (int i = 0; i < kB; ++i) {
    const uint4 four = *reinterpret_cast<const uint4*>(rows + i * kRowBytes);
    const uint32_t w[4] = {four.x, four.y, four.z, four.w};
    m = MaxU16x2(m, HalfMagnitudeMax(w));
  }
  m = MaxU16x2(m, __shfl_xor_sync(0xFFFFFFFFu, m, 1));
  uint32_t key = __float_as_uint(
      In::Convert(static_cast<typename In::Storage>(FoldHalves(m))));
  *tile_nan = key > kF32Inf;
  if (*tile_nan) {  // rare: both lanes of the tile are here
    uint32_t free_key = 0;
#pragma unroll 1
    for (int i = 0; i < kB; ++i) {
      const uint4 four = *reinterpret_cast<const uint4*>(rows + i * kRowBytes);
      const uint32_t w[4] = {four.x, four.y, four.z, four.w};
      float v[8];
      Unpack<In, 8>(w, v);
      free_key = max(free_key, NanFreeKey<8>(v));
    }
    key = max(free_key, __shfl_xor_sync(block_lanes, free_key, 1));
  }
  return key;
}

// The code word of a tile row's 8 values w (this lane's) at the tile's
// encode multiplier: the packed path (kScaled: `enc` is the multiplier / 8),
// or, in a tile with a NaN, the exact encoder (the same codes for the other
// values; a NaN's code as the CPU kernel's).
template <typename In, bool kScaled>
__device__ __forceinline__ uint32_t TileRowCodes(const uint32_t (&w)[4],
                                                 float enc, bool tile_nan) {
  if (tile_nan) {
    float v[8];
    Unpack<In, 8>(w, v);
    uint32_t q[2];
    EncodeExact<8>(v, kScaled ? MulRn(enc, 8.0f) : enc, q);
    return PackNibbles8(q[0], q[1]);
  }
  return HalfCodeWord8<In, kScaled>(w, enc);
}

// One 2D tile-half of PanelKernel (nvfp4/panel_cuda.cu): this
// thread's panel (16 rows of 16 bytes, kPanelRowBytes apart from `mine`, its
// own shared slots) and lane ^ 1's are one tile. Per row: the tile's code word
// (TileRowCodes) to `row` (null: no rowwise part; not by a dead lane) at byte
// (first + i * width) / 2, with the tile's scale byte at (first + i * width)
// / 16 of `row_scale` (by the even lane), as the 1D rowwise loop stores them;
// the row's colwise code word (the same word where the parts share the
// tensor scale, `same_scale`; else a second pass at the colwise one) staged
// in word (lane / 8) % 4 of the row, which the row has consumed (a warp's 32
// lanes: 32 banks). Then the 16 staged words, transposed as two 8x8 nibble
// matrices, are the 16 codes of each of the thread's 8 columns, staged where
// the 1D colwise steps stage theirs (StagedCodeRow, StagedScaleRow: column c
// is sub c % 2 of word c / 2). `*_scaled`: the tables
// hold the multipliers / 8 (the packed encoders).
template <typename In>
__device__ __forceinline__ void Panel2d(
    uint8_t* mine, uint8_t* row, uint8_t* row_scale, int64_t first,
    int64_t width, bool live, bool same_scale, bool row_scaled, bool col_scaled,
    float row_factor, float col_factor, const float* row_table,
    const float* col_table) {
  constexpr int kRowBytes = kPanelRowBytes;
  constexpr int kRowWords = kRowBytes / 4;
  const int lane = threadIdx.x % 32;
  const int jw0 = lane / 8 % 4;
  const bool rowwise = row != nullptr;
  bool tile_nan;
  const uint32_t key =
      TileKey<In, kRowBytes>(mine, 3u << (lane & 30), &tile_nan);
  const uint32_t col_sdb = E4M3Byte(MulRn(__uint_as_float(key), col_factor));
  // The 16 rows' code words at scale byte sdb of `table`: to the rowwise
  // output (store) and to the staging words (stage).
  auto encode_rows = [&](bool scaled, const float* table, uint32_t sdb,
                         bool store, bool stage) {
    const float enc = table[sdb & 127u];
    int64_t at = first;  // element of row i's first value
#pragma unroll 1
    for (int i = 0; i < kB; ++i, at += width) {
      uint8_t* const slots = mine + i * kRowBytes;
      const uint4 four = *reinterpret_cast<const uint4*>(slots);
      const uint32_t w[4] = {four.x, four.y, four.z, four.w};
      const uint32_t code = scaled
                                ? TileRowCodes<In, true>(w, enc, tile_nan)
                                : TileRowCodes<In, false>(w, enc, tile_nan);
      if (store) {
        __stcs(reinterpret_cast<unsigned int*>(row + at / 2), code);
        if (lane % 2 == 0) row_scale[at / kB] = static_cast<uint8_t>(sdb);
      }
      if (stage) reinterpret_cast<uint32_t*>(slots)[jw0] = code;
    }
  };
  if (rowwise) {
    const uint32_t row_sdb =
        E4M3Byte(MulRn(__uint_as_float(key), row_factor));
    encode_rows(row_scaled, row_table, row_sdb, live, same_scale);
  }
  if (!rowwise || !same_scale) {
    encode_rows(col_scaled, col_table, col_sdb, false, true);
  }
  uint32_t low[8];   // rows 0 .. 7
  uint32_t high[8];  // rows 8 .. 15
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    low[i] = reinterpret_cast<const uint32_t*>(mine + i * kRowBytes)[jw0];
    high[i] = reinterpret_cast<const uint32_t*>(mine + (i + 8) * kRowBytes)[jw0];
  }
  TransposeNibbles8x8(low);
  TransposeNibbles8x8(high);
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    uint32_t* const slot = reinterpret_cast<uint32_t*>(mine + 4 * (c / 2));
    slot[StagedCodeRow(c % 2) * kRowWords] = low[c];
    slot[(StagedCodeRow(c % 2) + 1) * kRowWords] = high[c];
    slot[StagedScaleRow<2>(c % 2) * kRowWords] = col_sdb;
  }
}

}  // namespace eqx_quant::cuda::nvfp4

#endif  // EQX_QUANT_CSRC_NVFP4_PANEL_2D_CUDA_CUH_
