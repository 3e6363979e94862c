// The 128x128 tile of the FP8 block quantize CUDA kernels, shared by the
// dense kernel (fp8_block/quantize_cuda.cu) and the grouped one
// (grouped/fp8_block_cuda.cu): QuantizeTile quantizes one tile whose place
// (TilePlace: its rows in x, its colwise matrix, its scale_inv positions) the
// calling kernel works out; everything else is the same code, so the two ops
// give the same bytes for the same rows.
//
// Float semantics. A block's amax is the max of the magnitude bit patterns
// with NaN dropped (the CPU kernel's AmaxKey): for 16-bit inputs in their
// own encoding (mxfp8/device_cuda.cuh's keys; widened to f32 at the end,
// exact and monotonic), for f32 as fmaxf of |x| (ThreadKeys says why the
// two agree). Its scale is Fp8BlockScale (one IEEE division,
// nvcc's default --prec-div=true), the stored inverse 1.0f / scale. An
// element is __fmul_rn(x, scale) (never contracted, subnormal products kept:
// --ftz=false) through the hardware `cvt.rn.satfinite` (cuda/fp8_convert.cuh),
// which equals FloatToFp8 on all 2^32 f32 inputs (+-inf -> +-max, NaN ->
// 0x7F; EqxQuantCudaFp8ConvertSelfTest), so an inf or NaN input, or a
// product that rounds past fp8_max, gets the CPU kernel's byte.
//
// QuantizeTile: one CTA per 128x128 tile, kThreads = 16 x kColLanes threads
// (256 for 16-bit inputs, 512 for f32). Thread (column lane c, row lane g) holds one 16-byte vector
// (kVec = 8 or 4 elements, columns c * kVec ...) of the 8 tile rows
// g + 16 k in registers: the 8 loads are issued at once, and the tile is
// never written to shared memory as input.
//   keys: one fold gives the thread's 8 vector keys and its part of the
//     column maxima (ThreadKeys).
//   1x128 rowwise: a row is the kColLanes lanes of one row lane. A
//     reduce-scatter butterfly over them (8 + log2(kColLanes / 8) shuffles,
//     not 8 x log2(kColLanes)) leaves each lane the amax of one of its 8
//     rows; the lane derives that row's scale (one division per lane, not 8)
//     and publishes it in shared memory, read back after a __syncwarp (a
//     row's lanes are one warp's). No barrier.
//   1x128 colwise: the column parts of a warp's row lanes are combined by a
//     shuffle and go through shared memory (2 / 8 KiB); after a barrier
//     thread j < 128 finishes column j's amax and scale and publishes the
//     scale; a second barrier makes them visible. Meanwhile the other warps
//     write their rowwise bytes.
//   128x128: the tile's amax by a warp max and a barrier; every thread
//     derives the one scale itself.
// Rowwise bytes go straight from registers (a warp store instruction covers
// whole 128-byte lines). Colwise bytes are staged in a 16 KiB FP8 tile
// (fp8/device_cuda.cuh's StagedFp8Tile swizzle: conflict-free both ways) and
// written transposed as in the FP8 cast + transpose kernel: units of 16
// rows x 4 columns, a 4x4 byte transpose per 4 rows, 16-byte streaming
// stores, 8 neighbouring lanes filling a 128-byte line of one output row.
// With 128x128 and both layouts the rowwise bytes are the colwise bytes: they
// are staged as they are stored.
//
// kAligned (x 16-byte aligned, C % kVec == 0, row buffer kVec-aligned): every
// vector is whole or wholly outside the tile, loaded with one 16-byte load and
// stored with one kVec-byte store. Otherwise each element is loaded and each
// byte stored on its own, with the same arithmetic. The colwise write-out
// stores 16, 4 or 1 bytes at a time (as the colwise matrix's rows and the
// col buffer's alignment allow). Offsets are 64-bit.

#ifndef EQX_QUANT_CSRC_FP8_BLOCK_TILE_CUDA_CUH_
#define EQX_QUANT_CSRC_FP8_BLOCK_TILE_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/fp8_block_problem.h"
#include "common/fp8_format.h"
#include "cuda/fp8_convert.cuh"
#include "fp8/device_cuda.cuh"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda::fp8_block_tile {

using mxfp8::Bf16In;
using mxfp8::F16In;
using mxfp8::F32In;
using mxfp8::KeyMax;
using mxfp8::QuantizeVector;

constexpr int kB = static_cast<int>(kFp8Block);
constexpr int kRowsPerThread = 8;
constexpr int kRowLanes = kB / kRowsPerThread;  // 16: thread rows g + 16 k

// The staged colwise tile: 128 rows of 128 FP8 bytes.
using Staged = fp8::StagedFp8Tile<kB>;
static_assert(fp8::kStagedRows == kB, "the staged tile is one tile high");

// The thread layout for input type In.
template <typename In>
struct Layout {
  static constexpr int kVec = In::kVec;                     // 8 or 4
  static constexpr int kColLanes = kB / kVec;               // 16 or 32
  static constexpr int kThreads = kRowLanes * kColLanes;    // 256 or 512
  static constexpr int kWarps = kThreads / 32;
  static_assert(kColLanes >= 16 && kColLanes <= 32, "a row within a warp");
};

// CTAs per SM: 1024 threads at <= 64 registers; the element-wise loads of
// unaligned 16-bit rows (64 in flight per thread) need more registers.
template <typename In, bool kAligned>
constexpr int MinBlocks() {
  constexpr int kThreads = Layout<In>::kThreads;
  return kAligned || kThreads > 256 ? 1024 / kThreads : 2;
}

// What every tile of a launch shares.
struct TileParams {
  const void* x;
  uint8_t* row;
  float* row_scale;
  uint8_t* col;
  float* col_scale;
  int64_t cols;       // C
  uint32_t cb_count;  // ceil(C / 128)
  float input_max;
  float amax_epsilon;
  bool power_2_scales;
  bool use_2d;
};

// The shared parameters of a launch over the buffers `b` (dense or grouped:
// the same field names) for the settings `s`, C = `cols`.
template <typename Buffers>
TileParams MakeTileParams(const Fp8BlockQuantizeProblem& s, int64_t cols, const Buffers& b) {
  TileParams p{};
  p.x = b.x;
  p.row = b.row;
  p.row_scale = b.row_scale;
  p.col = b.col;
  p.col_scale = b.col_scale;
  p.cols = cols;
  p.cb_count = static_cast<uint32_t>(Fp8Blocks(cols));
  p.input_max = s.input_max;
  p.amax_epsilon = s.amax_epsilon;
  p.power_2_scales = s.power_2_scales;
  p.use_2d = s.use_2d;
  return p;
}

// Where one tile lies, as its kernel maps it (dense: an example's tile;
// grouped: a group's tile, its rows counted from the group's start).
struct TilePlace {
  int64_t row0;   // its first row in the (rows, C) view of x (and rowwise)
  int64_t c0;     // its first column (128 cb)
  uint32_t cb;    // its column block
  int tile_rows;  // 1..128
  int tile_cols;  // 1..128
  // The colwise copy it belongs to: a (C, col_rows) matrix at col_base, the
  // tile's rows from col_r0.
  uint8_t* col_base;
  int64_t col_rows;
  int64_t col_r0;
  int col_store;  // bytes per colwise store: ColStoreBytes of that matrix
  // scale_inv positions: 128x128 in row_scale / col_scale; 1x128 colwise,
  // column c0 + j at col_scale[col_scale_1d + j * col_scale_stride]. The
  // 1x128 rowwise scale of row r is row_scale[(row0 + r) * cb_count + cb].
  int64_t row_scale_2d;
  int64_t col_scale_2d;
  int64_t col_scale_1d;
  int64_t col_scale_stride;
};

// Whether `ptr` is a multiple of `bytes` (a power of two).
__host__ __device__ __forceinline__ bool Aligned(const void* ptr, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

// Bytes per store of a colwise matrix of `rows` rows at `col`: 16 where its
// rows are whole 16-byte vectors, else 4 where they are whole words, else 1.
__host__ __device__ __forceinline__ int ColStoreBytes(int64_t rows, const uint8_t* col) {
  if (rows % 16 == 0 && Aligned(col, 16)) return 16;
  if (rows % 4 == 0 && Aligned(col, 4)) return 4;
  return 1;
}

// Fp8BlockScale of a block amax (NaN-free, non-negative).
template <Fp8Format kFormat>
__device__ __forceinline__ float ScaleOf(float amax, const TileParams& p) {
  return Fp8BlockScale(amax, Fp8MaxFinite(kFormat), p.input_max,
                       p.power_2_scales, p.amax_epsilon);
}

// The first `valid` (1..kVec) elements at p packed like a 16-byte load,
// the rest zero: for rows that are not 16-byte aligned or a partial vector.
template <typename In>
__device__ __forceinline__ uint4 LoadPartial(const typename In::Storage* p,
                                             int valid) {
  uint32_t words[4] = {0u, 0u, 0u, 0u};
  if constexpr (sizeof(typename In::Storage) == 4) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (e < valid) words[e] = __float_as_uint(__ldg(p + e));
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (e < valid) {
        words[e / 2] |= static_cast<uint32_t>(__ldg(p + e)) << (16 * (e % 2));
      }
    }
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// The first `valid` bytes of q (little-endian words) to dst, one by one.
template <int kWords>
__device__ __forceinline__ void StoreBytes(uint8_t* dst,
                                           const uint32_t (&q)[kWords],
                                           int valid) {
#pragma unroll
  for (int e = 0; e < 4 * kWords; ++e) {
    if (e < valid) dst[e] = static_cast<uint8_t>(q[e / 4] >> (8 * (e % 4)));
  }
}

// Reduce-scatter of the 8 row keys k[0..7] over the kLanes lanes of one row
// lane (lane bits below kLanes): three halving exchanges, then a plain max
// over the remaining lane bits. Returns the full max of row index `mine`
// (0..7) = 4 bit(kLanes/2) + 2 bit(kLanes/4) + bit(kLanes/8) of `c`.
template <int kLanes>
__device__ __forceinline__ uint32_t RowKeyScatter(uint32_t (&k)[8], int c,
                                                  int& mine) {
  const bool h1 = (c & (kLanes / 2)) != 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t send = h1 ? k[i] : k[i + 4];
    const uint32_t keep = h1 ? k[i + 4] : k[i];
    k[i] = max(keep, __shfl_xor_sync(0xFFFFFFFFu, send, kLanes / 2));
  }
  const bool h2 = (c & (kLanes / 4)) != 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t send = h2 ? k[i] : k[i + 2];
    const uint32_t keep = h2 ? k[i + 2] : k[i];
    k[i] = max(keep, __shfl_xor_sync(0xFFFFFFFFu, send, kLanes / 4));
  }
  const bool h3 = (c & (kLanes / 8)) != 0;
  uint32_t key = max(h3 ? k[1] : k[0],
                     __shfl_xor_sync(0xFFFFFFFFu, h3 ? k[0] : k[1], kLanes / 8));
#pragma unroll
  for (int s = kLanes / 16; s >= 1; s /= 2) {
    key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, s));
  }
  mine = 4 * h1 + 2 * h2 + h3;
  return key;
}

// The thread's keys: row_keys[k], the NaN-ignoring max key of its vector of
// row k, and returned, the per-key maxima over its 8 vectors, word j of the
// vectors in component j (its part of the column maxima). mxfp8::TileKeys on
// the keys of 16-bit inputs; for f32 the same keys as fmaxf of |x|: max.f32
// drops a NaN operand, keeps subnormals (no FTZ), and orders non-negative
// floats as their bit patterns, while the absolute value is an operand
// modifier (integer keys would hold 32 masked words at once: spills).
template <typename In>
__device__ __forceinline__ uint4 ThreadKeys(const uint32_t (&w)[kRowsPerThread][4],
                                            uint32_t (&row_keys)[kRowsPerThread]) {
  if constexpr (In::kKeysPerWord == 2) {
    return mxfp8::TileKeys<In, kRowsPerThread>(w, row_keys);
  } else {
    float col[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k) {
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = fabsf(__uint_as_float(w[k][j]));
        col[j] = fmaxf(col[j], v[j]);
      }
      row_keys[k] = __float_as_uint(fmaxf(fmaxf(fmaxf(0.0f, v[0]), v[1]), fmaxf(v[2], v[3])));
    }
    return make_uint4(__float_as_uint(col[0]), __float_as_uint(col[1]),
                      __float_as_uint(col[2]), __float_as_uint(col[3]));
  }
}

// Colwise write-out unit `unit` (16 rows x 4 columns of the staged tile at
// (r0, c0) of an example whose colwise copy starts at col): kStore bytes per
// store (16: R % 16 == 0; 4: R % 4 == 0; 1: any), only bytes inside the
// tensor (tile_rows x tile_cols).
template <int kStore>
__device__ __forceinline__ void WriteColUnit(const uint32_t* staging, int unit,
                                             uint8_t* col, int64_t rows,
                                             int64_t r0, int64_t c0,
                                             int tile_rows, int tile_cols) {
  const int block = unit % (kB / 16);
  const int group = unit / (kB / 16);
  if (16 * block >= tile_rows || 4 * group >= tile_cols) return;
  uint32_t w[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    w[k] = staging[Staged::Staged(16 * block + k, group)];
  }
  uint32_t out[4][4];
  fp8::Transpose16x4(w, out);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (4 * group + q >= tile_cols) break;
    uint8_t* dst = col + (c0 + 4 * group + q) * rows + r0 + 16 * block;
    if constexpr (kStore == 16) {
      StoreStreaming16(dst, make_uint4(out[q][0], out[q][1], out[q][2], out[q][3]));
    } else if constexpr (kStore == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (16 * block + 4 * i < tile_rows) {
          const uint32_t word[1] = {out[q][i]};
          StoreCastWords(dst + 4 * i, word);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t word[1] = {out[q][i]};
        StoreBytes(dst + 4 * i, word, tile_rows - 16 * block - 4 * i);
      }
    }
  }
}

// One CTA's tile (every thread of the Layout<In>::kThreads-thread CTA calls it).
template <typename In, Fp8Format kFormat, bool kRow, bool kCol, bool kAligned>
__device__ __forceinline__ void QuantizeTile(const TileParams& p, const TilePlace& at) {
  using L = Layout<In>;
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;
  constexpr int kOutWords = kVec / 4;
  constexpr int kColLanes = L::kColLanes;
  // The staged colwise bytes; each warp's part of the column maxima (1x128
  // colwise); the column and row scales (1x128); the warps' amax keys
  // (128x128).
  __shared__ __align__(16) uint32_t staging[kCol ? Staged::kStagingWords : 4];
  __shared__ __align__(16) uint32_t part[kCol ? L::kWarps : 1][kColLanes * 4];
  __shared__ __align__(16) float col_factor[kCol ? kB : 4];
  __shared__ float row_factor[kRow ? kB : 1];
  __shared__ uint32_t warp_key[L::kWarps];

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int c = tid % kColLanes;  // column lane
  const int g = tid / kColLanes;  // row lane

  const int64_t row0 = at.row0;
  const int64_t c0 = at.c0;
  const uint32_t cb = at.cb;
  const int tile_rows = at.tile_rows;
  const int tile_cols = at.tile_cols;
  // Elements of this thread's vector inside the tile (kAligned: 0 or kVec).
  const int valid = max(0, min(kVec, tile_cols - c * kVec));
  const int64_t step = int64_t{kRowLanes} * p.cols;  // between its rows
  const int64_t first = (row0 + g) * p.cols + c0 + c * kVec;
  auto row_in = [&](int k) { return g + kRowLanes * k < tile_rows; };

  uint32_t w[kRowsPerThread][4];
  {
    const Storage* x = static_cast<const Storage*>(p.x) + first;
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k) {
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (row_in(k) && valid > 0) {
        v = kAligned ? LoadStreaming(x + k * step) : LoadPartial<In>(x + k * step, valid);
      }
      w[k][0] = v.x;
      w[k][1] = v.y;
      w[k][2] = v.z;
      w[k][3] = v.w;
    }
  }
  // Zeros outside the tensor: the tile as if zero-padded.
  uint32_t row_keys[kRowsPerThread];
  const uint4 col_words = ThreadKeys<In>(w, row_keys);

  uint8_t* const row_out = kRow ? p.row + first : nullptr;
  // The thread's rowwise bytes, row k at scale[scale_step * k]; with
  // `stage`, also its colwise bytes (128x128: the same bytes).
  auto rowwise = [&](const float* scale, int scale_step, bool stage) {
    // `step` opaquely: else the loads' 8 64-bit row offsets stay live until
    // these stores.
    int64_t out_step = step;
    asm("" : "+l"(out_step));
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k) {
      uint32_t q[kOutWords];
      QuantizeVector<In, kFormat, true>(w[k], scale + scale_step * k, q);
      if (row_in(k) && valid > 0) {
        if constexpr (kAligned) {
          StoreCastWords(row_out + k * out_step, q);
        } else {
          StoreBytes(row_out + k * out_step, q, valid);
        }
      }
      if (kCol && stage) {
        StageCastWords(&staging[Staged::Staged(g + kRowLanes * k, c * kOutWords)], q);
      }
    }
  };
  // The thread's colwise bytes at the factors f of its kVec columns, staged.
  auto colwise = [&](const float (&f)[kVec]) {
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k) {
      // The words again, opaquely: else the compiler keeps the rowwise pass's
      // widened elements (twice the registers) for this one.
      uint32_t v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = w[k][j];
        asm("" : "+r"(v[j]));
      }
      uint32_t q[kOutWords];
      QuantizeVector<In, kFormat, false>(v, f, q);
      StageCastWords(&staging[Staged::Staged(g + kRowLanes * k, c * kOutWords)], q);
    }
  };

  if (p.use_2d) {
    uint32_t key = 0;
#pragma unroll
    for (int k = 0; k < kRowsPerThread; ++k) key = max(key, row_keys[k]);
    key = __reduce_max_sync(0xFFFFFFFFu, key);
    if (lane == 0) warp_key[warp] = key;
    __syncthreads();
#pragma unroll
    for (int v = 0; v < L::kWarps; ++v) key = max(key, warp_key[v]);
    const float scale[1] = {ScaleOf<kFormat>(In::KeyToFloat(key), p)};
    if (tid == 0) {
      const float inverse = 1.0f / scale[0];
      if (kRow) p.row_scale[at.row_scale_2d] = inverse;
      if (kCol) p.col_scale[at.col_scale_2d] = inverse;
    }
    if constexpr (kRow) {
      rowwise(scale, 0, true);
    } else {
      float f[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) f[e] = scale[0];
      colwise(f);
    }
  } else {
    if constexpr (kCol) {
      // This warp's column parts (its row lanes combined) to shared memory.
      uint32_t cw[4] = {col_words.x, col_words.y, col_words.z, col_words.w};
#pragma unroll
      for (int s = kColLanes; s < 32; s *= 2) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          cw[j] = KeyMax<In>(cw[j], __shfl_xor_sync(0xFFFFFFFFu, cw[j], s));
        }
      }
      if (lane < kColLanes) {
        *reinterpret_cast<uint4*>(&part[warp][4 * c]) = make_uint4(cw[0], cw[1], cw[2], cw[3]);
      }
    }
    if constexpr (kRow) {
      int mine = 0;
      const uint32_t key = RowKeyScatter<kColLanes>(row_keys, c, mine);
      const float scale = ScaleOf<kFormat>(In::KeyToFloat(key), p);
      const int r = g + kRowLanes * mine;
      if (c % (kColLanes / 8) == 0) {
        // A row's lanes are in one warp: its scale is read back after
        // __syncwarp (shared memory rather than 8 shuffles: 8 fewer live
        // registers through the rowwise pass).
        row_factor[r] = scale;
        if (r < tile_rows) p.row_scale[(row0 + r) * p.cb_count + cb] = 1.0f / scale;
      }
      __syncwarp();
    }
    if constexpr (kCol) {
      __syncthreads();  // the column parts are in
      if (tid < kB) {
        // Column j: key word j / kKeysPerWord of the parts, half j % 2.
        const int j = tid;
        const int word = j / In::kKeysPerWord;
        uint32_t m = 0;
#pragma unroll
        for (int v = 0; v < L::kWarps; ++v) m = KeyMax<In>(m, part[v][word]);
        const uint32_t key = In::kKeysPerWord == 2 ? (j % 2 ? m >> 16 : m & 0xFFFFu) : m;
        const float scale = ScaleOf<kFormat>(In::KeyToFloat(key), p);
        col_factor[j] = scale;
        if (j < tile_cols) {
          p.col_scale[at.col_scale_1d + j * at.col_scale_stride] = 1.0f / scale;
        }
      }
    }
    if constexpr (kRow) rowwise(&row_factor[g], kRowLanes, false);
    if constexpr (kCol) {
      __syncthreads();  // the column scales are in
      float f[kVec];
      mxfp8::LoadColumnFactors<kVec>(&col_factor[c * kVec], f);
      colwise(f);
    }
  }

  if constexpr (kCol) {
    __syncthreads();  // the staged tile is complete
    constexpr int kUnits = Staged::kUnits;  // 256
    for (int unit = tid; unit < kUnits; unit += L::kThreads) {
      if (at.col_store == 16) {
        WriteColUnit<16>(staging, unit, at.col_base, at.col_rows, at.col_r0, c0, tile_rows, tile_cols);
      } else if (at.col_store == 4) {
        WriteColUnit<4>(staging, unit, at.col_base, at.col_rows, at.col_r0, c0, tile_rows, tile_cols);
      } else {
        WriteColUnit<1>(staging, unit, at.col_base, at.col_rows, at.col_r0, c0, tile_rows, tile_cols);
      }
    }
  }
}


}  // namespace eqx_quant::cuda::fp8_block_tile

#endif  // EQX_QUANT_CSRC_FP8_BLOCK_TILE_CUDA_CUH_
