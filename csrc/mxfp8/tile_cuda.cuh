// The MXFP8 tile kernel (sm_90a): TileKernel, the colwise (and rowwise +
// colwise) path of eqx_quant_mxfp8_quantize, and its rowwise-only form with
// the dbias' 32-row sums. Included by mxfp8/quantize_cuda.cu only
// (which launches it); same bytes as its other kernels and the CPU kernel.
//
// TileKernel<kRow, kCol> for colwise (and rowwise + colwise) outputs,
// one CTA per tile or strip (below; short CTAs stream faster than a
// persistent wave; the grid-stride loop serves grids beyond 2^30). A tile
// is 32 rows (one colwise block height: 32 consecutive k of one example
// slice a) x 32 * kVec columns of the (C*L)-wide rows, kVec = elements
// per 16 bytes (8 for bf16 / f16, 4 for f32): 16 KiB of input. Warp w
// owns rows w, w+8, w+16, w+24, one 16-byte vector per lane and row. The
// next tile's 4 vectors per thread are fetched with cp.async into a
// second shared-memory buffer (2 x 16 KiB) while the current one is
// processed. A thread's keys (its 4 rowwise block keys and its part of
// the column maxima) come from one fold with one NaN test (TileKeys).
//   rowwise: a block is 32/kVec consecutive lanes; its amax is a shuffle
//     butterfly; the block's first lane writes the scale byte.
//   colwise: the 8 warp partials go through shared memory (4 KiB); 128
//     threads finish the column maxima, write the column scale bytes and
//     publish 2^(127-E) per column.
//
// The FP8 bytes of a warp's 4 rows are staged in the warp's (already
// consumed) part of the input buffer and written with 16-byte stores
// (4 or 8 byte stores from registers when the rows are not 16-byte
// aligned).
//
// Where a tile lies (two divisions of its index) is found once, for its
// prefetch, and kept; inside a strip it is the last tile moved right.
//
// Strips (W % 512 == 0, 16-byte aligned scale buffers): a CTA takes the
// 2 (f32: 4) tiles of 512 columns of one row block and stages their
// scale bytes (16 per row, 512 contiguous colwise), stored after the last
// tile as 16-byte streaming stores; otherwise each scale byte is stored
// as found. Strips of 512 columns rather than longer ones: shorter CTAs,
// shorter tail. kWhole (strips, staged stores, K % 32 == 0): every tile
// whole, no bounds tests.
//
// kSums (the op's dbias, K % 32 == 0): each column's sum over the tile's
// 32 rows as the perfect pairwise tree, one float per column and block.
// With both layouts it is read from the shared-memory tile after one more
// barrier (the rowwise bytes are then staged after the next one).
//
// TileKernel<kRow, !kCol, kSums>: the op's dbias rowwise only (K % 32 ==
// 0, L % 32 == 0; Mxfp8RowTileSumsTake): the same tiles, warp w holding
// rows 4w .. 4w + 3, so a thread adds its own 4 rows in registers, and
// one barrier per tile before the 8 warp sums of a column are added
// (faster than the column tree sums kernel with the rowwise blocks,
// DbiasTreeKernel<MxRow>, latency bound at 2 CTAs per SM).

#ifndef EQX_QUANT_CSRC_MXFP8_TILE_CUDA_CUH_
#define EQX_QUANT_CSRC_MXFP8_TILE_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/e8m0.h"
#include "common/fp8_format.h"
#include "common/mxfp8_problem.h"
#include "cuda/cp_async.cuh"
#include "cuda/fp8_convert.cuh"
#include "cuda/pairwise_tree.cuh"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda::mxfp8_tile {

using mxfp8::BlockScale;
using mxfp8::KeyMax;
using mxfp8::QuantizeVector;

constexpr int kBlock = static_cast<int>(kMxfp8BlockSize);  // 32
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerThread = kBlock / kWarps;  // 4
constexpr int kStripCols = 512;  // columns of a TileKernel strip
static_assert(kRowsPerThread * kWarps == kBlock, "a tile is one block high");

// The tile kernel's parameters.
struct TileParams {
  const void* x;
  uint8_t* row;        // if kRow
  uint8_t* row_scale;  // if kRow
  uint8_t* col;        // if kCol
  uint8_t* col_scale;  // if kCol
  int64_t rows;        // K (rows per example slice a)
  int64_t width;       // W = C * L, elements per row; a multiple of kVec
  uint32_t k_tiles;    // ceil(K / 32)
  uint32_t w_tiles;    // ceil(W / tile columns)
  int64_t tiles;       // A * k_tiles * w_tiles < 2^31
  bool wide;           // outputs 16-byte aligned and W % 16 == 0
  bool strips;         // W % 512 == 0, 16-byte aligned scale buffers
  float* sums;         // kSums: A * k_tiles x W column sums, one row per tile row
};

// Where tile t lies.
struct Tile {
  int64_t row0;       // first row: a * K + kb * 32
  int64_t col0;       // first column
  int64_t scale_row;  // its col_scale row: a * k_tiles + kb
  int64_t rows;       // rows in the tile (<= 32)
};

__device__ __forceinline__ Tile TileAt(const TileParams& p, int64_t t,
                                       int tile_cols) {
  const uint32_t tile = static_cast<uint32_t>(t);
  const uint32_t rest = tile / p.w_tiles;
  const uint32_t a = rest / p.k_tiles;
  const uint32_t kb = rest - a * p.k_tiles;
  Tile out;
  out.row0 = int64_t{a} * p.rows + int64_t{kb} * kBlock;
  out.col0 = int64_t{tile - rest * p.w_tiles} * tile_cols;
  out.scale_row = rest;
  out.rows = min(int64_t{kBlock}, p.rows - int64_t{kb} * kBlock);
  return out;
}

// Resident CTAs per SM (registers <= 64 or 48; 38 KiB of shared memory each).
template <bool kRow, bool kCol>
constexpr int kTileMinBlocks = kRow ? 4 : 5;

// Element `sub` of a word of In's storage (kVec / 4 elements per word), as f32.
template <typename In>
__device__ __forceinline__ float ElementOfWord(uint32_t word, int sub) {
  const uint32_t w[4] = {word, word, word, word};
  return In::Element(w, sub);  // Element reads w[e / (kVec / 4)]: word
}

// Floats of the rowwise-only kSums kernel's dynamic shared memory: two
// buffers (alternating per tile) of the 8 warps' 4-row column sums.
template <typename In, bool kCol, bool kSums>
constexpr int kRowSumFloats = !kCol && kSums ? 2 * kWarps * 32 * In::kVec : 0;

// kSums (the MXFP8 op's dbias; every tile 32 rows): each column's sum over
// the tile's 32 rows as the perfect pairwise tree (the canonical tree's
// 32-row nodes), NaN canonical, to p.sums[tile row][col].
//   With both layouts the rows of a tile are spread over the warps (row
//   warp + 8u), so each thread parks its 4 raw vectors in shared memory next
//   to the column maxima; after the barrier that publishes those, thread c
//   adds column c: for each u the tree over the 8 warps (rows 8u..8u+7), then
//   the tree over the 4 u.
//   Rowwise only (kCol false: no colwise bytes need the rows spread), warp w
//   holds tile rows 4w .. 4w + 3, so a thread adds its own 4 rows (their
//   perfect subtree, per column) and parks the kVec sums in the dynamic
//   shared memory (kRowSumFloats: two buffers, so one barrier per tile);
//   after that barrier thread c adds column c's 8 warp sums as the perfect
//   tree.
template <typename In, Fp8Format kFormat, bool kRow, bool kCol, bool kSums,
          bool kWhole>
__global__ void __launch_bounds__(kThreads, (kTileMinBlocks<kRow, kCol>))
    TileKernel(const __grid_constant__ TileParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;
  constexpr int kTileCols = 32 * kVec;
  constexpr int kLanesPerBlock = kBlock / kVec;
  constexpr int kStageBytes = kRowsPerThread * kTileCols;  // per warp
  constexpr int kOutWords = kVec / 4;
  static_assert(kCol || (kRow && kSums),
                "rowwise only without the sums runs RowStreamKernel");
  static_assert(kStageBytes <= kRowsPerThread * 32 * 16, "stage fits");
  // A strip: the kStripTiles tiles of 512 columns of one row block (16
  // scale bytes per row, 512 contiguous colwise scale bytes).
  constexpr int kStripTiles = kStripCols / kTileCols;  // 2 or 4
  constexpr int kStripRowBytes = kStripCols / kBlock;  // 16
  static_assert(kStripRowBytes == 16, "one 16-byte store per row");
  constexpr int kTileBlocks = kTileCols / kBlock;      // 8 or 4
  // Two tiles of input: [buffer][warp][row u][lane][16 bytes].
  __shared__ __align__(16) uint32_t buf[2][kWarps][kRowsPerThread][32][4];
  __shared__ __align__(16) uint32_t part[kCol ? kWarps : 1][kCol ? 32 * 4 : 4];
  __shared__ __align__(16) float factors[kCol ? kTileCols : 4];
  // p.strips: the strip's scale bytes, stored whole after its last tile.
  // A CTA then has one strip (strips < 2^29, the grid is one per strip).
  __shared__ __align__(16) uint8_t staged_row[kRow ? kBlock : 1][kStripRowBytes];
  __shared__ __align__(16) uint8_t staged_col[kCol ? kStripCols : 16];
  // Rowwise-only kSums: [buffer][warp][tile column] 4-row sums.
  extern __shared__ __align__(16) float row_sums[];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const Storage* x = static_cast<const Storage*>(p.x);

  // Row u of this thread is tile row warp + kWarps * u (kCol), else
  // kRowsPerThread * warp + u.
  auto row_of = [&](int u) {
    return kCol ? warp + kWarps * u : kRowsPerThread * warp + u;
  };
  auto elem_at = [&](const Tile& t, int u, int64_t col) {
    return (t.row0 + row_of(u)) * p.width + col;
  };
  auto valid_at = [&](const Tile& t, int u, int64_t col) {
    return kWhole || (row_of(u) < t.rows && col < p.width);
  };
  const bool wide = kWhole || p.wide;
  const bool strips = kWhole || p.strips;
  auto fetch = [&](const Tile& t, int b) {
    const int64_t col = t.col0 + lane * kVec;
    const Storage* src = x + elem_at(t, 0, col);  // rows row_of(1) apart
    constexpr int kRowStep = kCol ? kWarps : 1;
#pragma unroll
    for (int u = 0; u < kRowsPerThread; ++u) {
      const bool valid = valid_at(t, u, col);
      AsyncCopy16(buf[b][warp][u][lane],
                  valid ? src + u * kRowStep * p.width : x, valid);
    }
  };

  // A CTA takes whole strips (strips) or single tiles, grid-stride, in
  // 32-bit arithmetic: tiles < 2^31 and grid x step <= max(tiles, 2^30).
  const uint32_t step = strips ? kStripTiles : 1;
  const uint32_t tiles = static_cast<uint32_t>(p.tiles);
  auto next_of = [&](uint32_t index) {
    return (index + 1) % step != 0 ? index + 1
                                   : index + 1 - step + gridDim.x * step;
  };
  // Where a tile lies is found once (the next tile's place is kept for the
  // next iteration); inside a strip it is the last tile moved one tile right.
  int cur = 0;
  const uint32_t first = blockIdx.x * step;
  Tile upcoming{};
  if (first < tiles) {
    upcoming = TileAt(p, first, kTileCols);
    fetch(upcoming, 0);
  }
  AsyncCommit();
  for (uint32_t index = first; index < tiles;
       index = next_of(index), cur ^= 1) {
    const Tile t = upcoming;
    const uint32_t next = next_of(index);
    if (next < tiles) {
      if (strips && (index + 1) % step != 0) {  // the same strip
        upcoming.col0 += kTileCols;
      } else {
        upcoming = TileAt(p, next, kTileCols);
      }
      fetch(upcoming, cur ^ 1);
    }
    AsyncCommit();
    AsyncWaitGroup<1>();  // this thread's part of tile `index` is in

    const int64_t my_col = t.col0 + lane * kVec;
    const int in_strip = static_cast<int>(index % kStripTiles);  // if strips
    uint32_t w[kRowsPerThread][4];
    mxfp8::ReadSlotVectors(buf[cur][warp], lane, w);
    __syncwarp();  // the warp's slots are read: they become its stage
    uint8_t* const stage = reinterpret_cast<uint8_t*>(buf[cur][warp]);

    // One row of FP8 bytes: staged, or stored straight (kVec bytes).
    auto emit = [&](int u, const uint32_t (&q)[kOutWords], uint8_t* out) {
      if (wide) {
        uint8_t* slot = stage + u * kTileCols + lane * kVec;
        StageCastWords(slot, q);
      } else if (valid_at(t, u, my_col)) {
        uint8_t* dst = out + elem_at(t, u, my_col);
        StoreCastWords(dst, q);
      }
    };
    // The staged rows -> 16-byte stores (a warp instruction writes whole
    // 512-byte rows, or 4 rows of 128 bytes for f32).
    auto flush = [&](uint8_t* out) {
      if (!wide) return;
      __syncwarp();
#pragma unroll
      for (int chunk = 0; chunk < kStageBytes / 512; ++chunk) {
        const int byte = chunk * 512 + lane * 16;
        const int u = byte / kTileCols;
        const int64_t col = t.col0 + byte % kTileCols;
        if (valid_at(t, u, col)) {
          StoreStreaming16(out + elem_at(t, u, col),
                           *reinterpret_cast<const uint4*>(stage + byte));
        }
      }
      __syncwarp();
    };

    // kSums: column `column`'s 32-row sum, NaN canonical.
    auto store_sum = [&](int column, float sum) {
      p.sums[t.scale_row * p.width + t.col0 + column] =
          sum != sum ? __uint_as_float(0x7FC00000u) : sum;
    };
    // After the strip's last tile: row i's staged scale bytes as one 16-byte
    // streaming store.
    auto store_row_strip = [&](int i) {
      const int64_t strip_col0 = t.col0 - (kStripTiles - 1) * kTileCols;
      StoreStreaming16(
          p.row_scale + (t.row0 + i) * (p.width / kBlock) + strip_col0 / kBlock,
          *reinterpret_cast<const uint4*>(&staged_row[kRow ? i : 0][0]));
    };

    // This thread's rowwise block keys and part of the column maxima (NaNs
    // dropped).
    uint32_t row_keys[kRowsPerThread];
    const uint4 col_keys = mxfp8::TileKeys<In, kRowsPerThread>(w, row_keys);
    if constexpr (kCol) {
      *reinterpret_cast<uint4*>(&part[warp][lane * 4]) = col_keys;
    }
    if constexpr (kSums && !kCol) {  // this thread's 4 rows, per column
      float* const my_sums = row_sums + (cur * kWarps + warp) * kTileCols;
#pragma unroll
      for (int e = 0; e < kVec; e += 4) {
        float s[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float v[kRowsPerThread];
#pragma unroll
          for (int u = 0; u < kRowsPerThread; ++u) {
            v[u] = In::Element(w[u], e + i);
          }
          PairwiseTree<kRowsPerThread>(v);
          s[i] = v[0];
        }
        *reinterpret_cast<float4*>(my_sums + lane * kVec + e) =
            make_float4(s[0], s[1], s[2], s[3]);
      }
    }
    if constexpr (kSums && kCol) {
      __syncthreads();  // every warp's part of the tile is in buf[cur]
      const int column = threadIdx.x;  // of the tile
      if (column < kTileCols && t.col0 + column < p.width) {
        constexpr int kPerWord = kVec / 4;
        const int slot = column / kVec;
        const int word = (column % kVec) / kPerWord;
        const int sub = column % kPerWord;
        float rows[kRowsPerThread];
#pragma unroll
        for (int u = 0; u < kRowsPerThread; ++u) {
          float v[kWarps];
#pragma unroll
          for (int r = 0; r < kWarps; ++r) {
            v[r] = ElementOfWord<In>(buf[cur][r][u][slot][word], sub);
          }
          PairwiseTree<kWarps>(v);
          rows[u] = v[0];
        }
        PairwiseTree<kRowsPerThread>(rows);
        store_sum(column, rows[0]);
      }
      // The rowwise bytes are staged over buf[cur] after the next barrier.
    }

    // The rowwise blocks (kSums: after the barrier below, when every thread
    // has read the tile's columns from buf[cur]).
    auto rowwise = [&] {
#pragma unroll
      for (int u = 0; u < kRowsPerThread; ++u) {
        uint32_t key = row_keys[u];
#pragma unroll
        for (int s = 1; s < kLanesPerBlock; s *= 2) {
          key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, s));
        }
        const uint32_t e = BlockScale<kFormat>(In::KeyToFloat(key));
        const float factor = mxfp8::BlockFactor(e);
        uint32_t q[kOutWords];
        QuantizeVector<In, kFormat, true>(w[u], &factor, q);
        if (lane % kLanesPerBlock == 0 && valid_at(t, u, my_col)) {
          if (strips) {
            staged_row[row_of(u)]
                      [in_strip * kTileBlocks + lane / kLanesPerBlock] = e;
          } else {
            p.row_scale[elem_at(t, u, my_col) / kBlock] = e;
          }
        }
        emit(u, q, p.row);
      }
      flush(p.row);
    };
    if constexpr (kRow && (!kSums || !kCol)) rowwise();

    if constexpr (kSums && !kCol) {
      __syncthreads();  // the warps' 4-row sums (and staged scale bytes) are in
      const int column = threadIdx.x;  // of the tile
      if (column < kTileCols && (kWhole || t.col0 + column < p.width)) {
        float v[kWarps];
#pragma unroll
        for (int r = 0; r < kWarps; ++r) {
          v[r] = row_sums[(cur * kWarps + r) * kTileCols + column];
        }
        PairwiseTree<kWarps>(v);
        store_sum(column, v[0]);
      }
      const int i = threadIdx.x;
      if (strips && in_strip == kStripTiles - 1 && i < kBlock &&
          (kWhole || i < t.rows)) {
        store_row_strip(i);
      }
      // The buffer of row_sums read here is next written two tiles on,
      // after every thread has passed the next tile's barrier.
    }

    if constexpr (kCol) {
      __syncthreads();  // the partials are in (kSums: the columns are read)
      if constexpr (kRow && kSums) rowwise();
      const int c = threadIdx.x;  // key word c: columns c * kKeysPerWord + h
      if (c < 32 * 4) {
        uint32_t m = part[0][c];
#pragma unroll
        for (int v = 1; v < kWarps; ++v) m = KeyMax<In>(m, part[v][c]);
        uint8_t* scales = p.col_scale + t.scale_row * p.width + t.col0;
#pragma unroll
        for (int h = 0; h < In::kKeysPerWord; ++h) {
          const uint32_t key =
              In::kKeysPerWord == 2 ? (h ? m >> 16 : m & 0xFFFFu) : m;
          const uint32_t e = BlockScale<kFormat>(In::KeyToFloat(key));
          const int column = c * In::kKeysPerWord + h;
          factors[column] = mxfp8::BlockFactor(e);
          if (strips) {
            staged_col[in_strip * kTileCols + column] = e;
          } else if (t.col0 + column < p.width) {
            scales[column] = e;
          }
        }
      }
      __syncthreads();  // the factors (and every staged scale byte) are in
      if (strips && in_strip == kStripTiles - 1) {
        // The strip's scales as 16-byte streaming stores: rowwise row i on
        // threads i < 32, colwise piece i - 32 on 32..63.
        const int64_t strip_col0 = t.col0 - (kStripTiles - 1) * kTileCols;
        const int i = threadIdx.x;
        if (kRow && i < kBlock) {
          if (kWhole || i < t.rows) store_row_strip(i);
        } else if (i >= kBlock && i < kBlock + kStripCols / 16) {
          StoreStreaming16(
              p.col_scale + t.scale_row * p.width + strip_col0 + 16 * (i - kBlock),
              *reinterpret_cast<const uint4*>(&staged_col[16 * (i - kBlock)]));
        }
      }
      float f[kVec];
      mxfp8::LoadColumnFactors<kVec>(&factors[lane * kVec], f);
#pragma unroll
      for (int u = 0; u < kRowsPerThread; ++u) {
        uint32_t q[kOutWords];
        QuantizeVector<In, kFormat, false>(w[u], f, q);
        emit(u, q, p.col);
      }
      flush(p.col);
      // The next tile writes `part` before its first barrier: every reader
      // of this tile's `part` passed the barrier above; every reader of
      // `factors` reaches the next tile's first barrier before any write.
    }
    // The next iteration's cp.async into this buffer is issued after the
    // warp's last stage read (flush ends with __syncwarp).
  }
}

}  // namespace eqx_quant::cuda::mxfp8_tile

#endif  // EQX_QUANT_CSRC_MXFP8_TILE_CUDA_CUH_
