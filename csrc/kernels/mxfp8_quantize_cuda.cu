// CUDA kernels of eqx_quant_mxfp8_quantize for sm_90a (H100 / H200).
//
// Semantics: exactly the CPU kernel's (kernels/mxfp8_quantize_cpu.h), bit for
// bit. Per block of 32 (a final partial block as if zero-padded):
//   amax  = NaN-ignoring max |x|, found as the max of the magnitude bit
//           patterns with NaN -> 0 (integer compares: no flush-to-zero issue)
//   E     = Mxfp8BlockScale(amax) = e8m0_round_up(fl(amax * fl(1/fp8_max)))
//           (the round-up by E8m0RoundUpNonNegative: amax is never NaN here)
//   bytes = cvt.rn.satfinite(fl(x * 2^(127-E)))    NaN -> 0x7F
// The helpers of common/e8m0.h are shared with the CPU kernel. This file is
// compiled with --fmad=false --ftz=false, and the per-element product is an
// explicit __fmul_rn, so a subnormal product (E near 0xFE) is kept. The FP8
// cast is the hardware convert `cvt.rn.satfinite.{e4m3,e5m2}x2.f32`, which
// equals fp8_format.h's FloatToFp8 on all 2^32 f32 inputs, NaN -> 0x7F in
// both formats (EqxQuantCudaFp8ConvertSelfTest in fp8_quantize_cuda.cu).
//
// Kernels (256 threads; nothing allocated):
//   * RowStreamKernel, rowwise only when every row is a whole number of
//     blocks (L % 32 == 0; aligned buffers): the data as one flat stream of
//     16-byte vectors, a block being 32/kVec consecutive lanes (amax by a
//     shuffle butterfly). One chunk of 4 vectors per thread per CTA, all
//     loads issued first, FP8 bytes written with streaming stores, and so are
//     a warp's scale bytes (staged in shared memory: one whole sector).
//   * TileKernel<kRow, kCol> for colwise (and rowwise + colwise) outputs,
//     one CTA per tile or strip (below; short CTAs measured faster than a
//     persistent wave; the grid-stride loop serves grids beyond 2^30). A tile
//     is 32 rows (one colwise block height: 32 consecutive k of one example
//     slice a) x 32 * kVec columns of the (C*L)-wide rows, kVec = elements
//     per 16 bytes (8 for bf16 / f16, 4 for f32): 16 KiB of input. Warp w
//     owns rows w, w+8, w+16, w+24, one 16-byte vector per lane and row. The
//     next tile's 4 vectors per thread are fetched with cp.async into a
//     second shared-memory buffer (2 x 16 KiB) while the current one is
//     processed. A thread's keys (its 4 rowwise block keys and its part of
//     the column maxima) come from one fold with one NaN test (TileKeys).
//       rowwise: a block is 32/kVec consecutive lanes; its amax is a shuffle
//         butterfly; the block's first lane writes the scale byte.
//       colwise: the 8 warp partials go through shared memory (4 KiB); 128
//         threads finish the column maxima, write the column scale bytes and
//         publish 2^(127-E) per column.
//     The FP8 bytes of a warp's 4 rows are staged in the warp's (already
//     consumed) part of the input buffer and written with 16-byte stores
//     (4 or 8 byte stores from registers when the rows are not 16-byte
//     aligned).
//     Where a tile lies (two divisions of its index) is found once, for its
//     prefetch, and kept; inside a strip it is the last tile moved right.
//     Strips (W % 512 == 0, 16-byte aligned scale buffers): a CTA takes the
//     2 (f32: 4) tiles of 512 columns of one row block and stages their
//     scale bytes (16 per row, 512 contiguous colwise), stored after the last
//     tile as 16-byte streaming stores; otherwise each scale byte is stored
//     as found. Strips of 512 / 1024 / 2048 columns measured 70.8 / 71.5 /
//     75.0 us at 8192^2 (b2b): shorter CTAs, shorter tail. kWhole (strips,
//     staged stores, K % 32 == 0): every tile whole, no bounds tests.
//     kSums (the op's dbias, K % 32 == 0): each column's sum over the tile's
//     32 rows as the perfect pairwise tree, one float per column and block.
//     With both layouts it is read from the shared-memory tile after one more
//     barrier (the rowwise bytes are then staged after the next one).
//   * TileKernel<kRow, !kCol, kSums>: the op's dbias rowwise only (K % 32 ==
//     0, L % 32 == 0; Mxfp8RowTileSumsTake): the same tiles, warp w holding
//     rows 4w .. 4w + 3, so a thread adds its own 4 rows in registers, and
//     one barrier per tile before the 8 warp sums of a column are added.
//     8192^2 bf16 (b2b, with the finish of the 256 node sums): 65.1 -> 55.7
//     us against the column tree sums kernel with the rowwise blocks
//     (DbiasTreeKernel<MxRow>, latency bound at 2 CTAs per SM); 4096^2 24.0
//     -> 16.9.
//   * RowScalarKernel / ColScalarKernel (mxfp8_scalar_cuda.cuh): one thread
//     per block, scalar loads, for every other shape or alignment (L % 32 !=
//     0, rows not a multiple of 16 input bytes, misaligned buffers). The
//     column kernel is coalesced (consecutive threads, consecutive columns).
// No kernel spills (ptxas -warn-spills is on in CMake).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/e8m0.h"
#include "common/fp8_format.h"
#include "common/mxfp8_problem.h"
#include "kernels/cuda_sm_count.h"
#include "kernels/mxfp8_quantize_cuda.h"
#include "kernels/mxfp8_quantize_cuda_device.cuh"
#include "kernels/mxfp8_row_stream_cuda.cuh"
#include "kernels/mxfp8_scalar_cuda.cuh"
#include "kernels/pairwise_tree_cuda.cuh"

namespace eqx_quant::cuda {
namespace {

using mxfp8::BlockScale;
using mxfp8::Bf16In;
using mxfp8::F16In;
using mxfp8::F32In;
using mxfp8::KeyMax;
using mxfp8::QuantizeVector;
using mxfp8_row::kRowStreamThreads;
using mxfp8_row::kRowStreamUnroll;
using mxfp8_row::RowStreamKernel;
using mxfp8_row::RowStreamParams;
using mxfp8_scalar::ColScalarKernel;
using mxfp8_scalar::kScalarThreads;
using mxfp8_scalar::RowScalarKernel;
using mxfp8_scalar::ScalarParams;

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
        const float sum = rows[0];
        p.sums[t.scale_row * p.width + t.col0 + column] =
            sum != sum ? __uint_as_float(0x7FC00000u) : sum;
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
        const float sum = v[0];
        p.sums[t.scale_row * p.width + t.col0 + column] =
            sum != sum ? __uint_as_float(0x7FC00000u) : sum;
      }
      if (strips && in_strip == kStripTiles - 1 && threadIdx.x < kBlock &&
          (kWhole || static_cast<int>(threadIdx.x) < t.rows)) {
        const int64_t strip_col0 = t.col0 - (kStripTiles - 1) * kTileCols;
        const int i = threadIdx.x;
        StoreStreaming16(
            p.row_scale + (t.row0 + i) * (p.width / kBlock) + strip_col0 / kBlock,
            *reinterpret_cast<const uint4*>(&staged_row[i][0]));
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
          if (kWhole || i < t.rows) {
            StoreStreaming16(
                p.row_scale + (t.row0 + i) * (p.width / kBlock) +
                    strip_col0 / kBlock,
                *reinterpret_cast<const uint4*>(&staged_row[kRow ? i : 0][0]));
          }
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

// ---------------------------------------------------------------------------
// Host side.

bool Aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

Mxfp8LaunchStatus Check(const char* what) {
  Mxfp8LaunchStatus status;
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    status.ok = false;
    status.cuda_error = static_cast<int>(error);
    status.what = what;
  }
  return status;
}

unsigned GridFor(int64_t work_items) {
  const int64_t kMaxGrid = int64_t{1} << 30;  // grid-stride beyond
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min(work_items, kMaxGrid)));
}

template <typename In, Fp8Format kFormat, bool kRow, bool kCol, bool kSums,
          bool kWhole>
Mxfp8LaunchStatus LaunchTileKernel(const TileParams& p, cudaStream_t stream) {
  // One CTA per strip (else per tile), prefetching inside the strip: short
  // CTAs measured faster than a persistent wave (.ci/probes/stream_cast.cu).
  // The kernel reads through shared memory only: prefer it to L1.
  auto* const kernel = &TileKernel<In, kFormat, kRow, kCol, kSums, kWhole>;
  static const bool carveout_set = [kernel] {
    const bool ok =
        cudaFuncSetAttribute(kernel,
                             cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared) == cudaSuccess;
    if (!ok) cudaGetLastError();  // a preference only
    return ok;
  }();
  (void)carveout_set;
  // The rowwise-only sums' buffers (with the static ones above 48 KiB).
  constexpr int kDynamicBytes =
      kRowSumFloats<In, kCol, kSums> * static_cast<int>(sizeof(float));
  if constexpr (kDynamicBytes > 0) {
    static const cudaError_t raised = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kDynamicBytes);
    if (raised != cudaSuccess) {
      return Mxfp8LaunchStatus{false, static_cast<int>(raised),
                               "raising the shared memory of TileKernel"};
    }
  }
  const int64_t strip_tiles = kStripCols / (32 * In::kVec);
  kernel<<<GridFor(p.strips ? p.tiles / strip_tiles : p.tiles), kThreads,
           kDynamicBytes, stream>>>(p);
  return Check("launching TileKernel");
}

// kWhole (strips, 16-byte rows, K % 32 == 0: no bounds) or the general kernel.
template <typename In, Fp8Format kFormat, bool kRow, bool kCol,
          bool kSums = false>
Mxfp8LaunchStatus LaunchTile(const TileParams& p, cudaStream_t stream) {
  if (p.tiles > int64_t{0x7FFFFFFF}) {
    return Mxfp8LaunchStatus{false, 0, "the tensor is too large (2^31 tiles)"};
  }
  if (p.strips && p.wide && p.rows % kBlock == 0) {
    return LaunchTileKernel<In, kFormat, kRow, kCol, kSums, true>(p, stream);
  }
  return LaunchTileKernel<In, kFormat, kRow, kCol, kSums, false>(p, stream);
}

template <typename In, Fp8Format kFormat>
Mxfp8LaunchStatus LaunchRowStream(const Mxfp8QuantizeBuffers& buffers,
                                  int64_t elements, cudaStream_t stream) {
  RowStreamParams p{};
  p.x = buffers.x;
  p.row = buffers.row;
  p.row_scale = buffers.row_scale;
  p.vectors = elements / In::kVec;
  p.words = Aligned(buffers.row_scale, 4);
  const int64_t chunk = int64_t{kRowStreamThreads} * kRowStreamUnroll;
  const int64_t chunks = (p.vectors + chunk - 1) / chunk;
  if (chunks > int64_t{0x7FFFFFFF}) {
    return Mxfp8LaunchStatus{false, 0, "the tensor is too large (2^31 chunks)"};
  }
  RowStreamKernel<In, kFormat>
      <<<static_cast<unsigned>(chunks), kRowStreamThreads, 0, stream>>>(p);
  return Check("launching RowStreamKernel");
}

template <typename In, Fp8Format kFormat>
Mxfp8LaunchStatus LaunchRowScalar(const Mxfp8QuantizeProblem& problem,
                                  const Mxfp8QuantizeBuffers& buffers,
                                  cudaStream_t stream) {
  ScalarParams p{};
  p.x = buffers.x;
  p.out = buffers.row;
  p.scale = buffers.row_scale;
  p.length = problem.last;
  p.blocks = Mxfp8Blocks(problem.last);
  p.total = problem.outer * problem.blocked * problem.inner * p.blocks;
  RowScalarKernel<In, kFormat>
      <<<GridFor((p.total + kScalarThreads - 1) / kScalarThreads),
         kScalarThreads, 0, stream>>>(p);
  return Check("launching RowScalarKernel");
}

template <typename In, Fp8Format kFormat>
Mxfp8LaunchStatus LaunchColScalar(const Mxfp8QuantizeProblem& problem,
                                  const Mxfp8QuantizeBuffers& buffers,
                                  cudaStream_t stream) {
  ScalarParams p{};
  p.x = buffers.x;
  p.out = buffers.col;
  p.scale = buffers.col_scale;
  p.length = problem.blocked;
  p.width = problem.inner * problem.last;
  p.blocks = Mxfp8Blocks(problem.blocked);
  p.total = problem.outer * p.blocks * p.width;
  ColScalarKernel<In, kFormat>
      <<<GridFor((p.total + kScalarThreads - 1) / kScalarThreads),
         kScalarThreads, 0, stream>>>(p);
  return Check("launching ColScalarKernel");
}

// Whether the rowwise-only tile kernel with the 32-row sums takes `problem`
// (kVec: elements per 16 bytes of x).
bool RowTileSumsTake(const Mxfp8QuantizeProblem& problem,
                     const Mxfp8QuantizeBuffers& buffers, int kVec) {
  return problem.rowwise && !problem.colwise && problem.blocked > 0 &&
         problem.blocked % kBlock == 0 && problem.last % kBlock == 0 &&
         problem.inner * problem.last % kVec == 0 &&
         Aligned(buffers.x, 16) && Aligned(buffers.row, kVec);
}

template <typename In, Fp8Format kFormat>
Mxfp8LaunchStatus Run(const Mxfp8QuantizeProblem& problem,
                      const Mxfp8QuantizeBuffers& buffers, float* tile_sums,
                      cudaStream_t stream) {
  constexpr int kVec = In::kVec;
  constexpr int64_t kTileCols = 32 * kVec;
  const int64_t width = problem.inner * problem.last;  // W
  const int64_t elements = problem.outer * problem.blocked * width;
  const bool x_ok = Aligned(buffers.x, 16);
  const bool row_in_tile = problem.rowwise && problem.last % kBlock == 0 &&
                           Aligned(buffers.row, kVec);

  if (!problem.colwise) {
    if (tile_sums != nullptr && RowTileSumsTake(problem, buffers, kVec)) {
      TileParams p{};
      p.x = buffers.x;
      p.row = buffers.row;
      p.row_scale = buffers.row_scale;
      p.rows = problem.blocked;
      p.width = width;
      const int64_t k_tiles = problem.blocked / kBlock;
      const int64_t w_tiles = (width + kTileCols - 1) / kTileCols;
      p.tiles = problem.outer * k_tiles * w_tiles;
      p.k_tiles = static_cast<uint32_t>(std::min<int64_t>(k_tiles, 0x7FFFFFFF));
      p.w_tiles = static_cast<uint32_t>(std::min<int64_t>(w_tiles, 0x7FFFFFFF));
      p.wide = width % 16 == 0 && Aligned(buffers.row, 16);
      p.strips = width % kStripCols == 0 && Aligned(buffers.row_scale, 16);
      p.sums = tile_sums;
      Mxfp8LaunchStatus status =
          LaunchTile<In, kFormat, true, false, true>(p, stream);
      status.tile_sums_written = status.ok;
      return status;
    }
    if (!x_ok || !row_in_tile) {
      return LaunchRowScalar<In, kFormat>(problem, buffers, stream);
    }
    return LaunchRowStream<In, kFormat>(buffers, elements, stream);
  }

  if (!x_ok || width % kVec != 0 || !Aligned(buffers.col, kVec)) {
    Mxfp8LaunchStatus status =
        LaunchColScalar<In, kFormat>(problem, buffers, stream);
    if (status.ok && problem.rowwise) {
      status = LaunchRowScalar<In, kFormat>(problem, buffers, stream);
    }
    return status;
  }
  TileParams p{};
  p.x = buffers.x;
  p.row = buffers.row;
  p.row_scale = buffers.row_scale;
  p.col = buffers.col;
  p.col_scale = buffers.col_scale;
  p.rows = problem.blocked;
  p.width = width;
  const int64_t k_tiles = Mxfp8Blocks(problem.blocked);
  const int64_t w_tiles = (width + kTileCols - 1) / kTileCols;
  p.tiles = problem.outer * k_tiles * w_tiles;
  p.k_tiles = static_cast<uint32_t>(std::min<int64_t>(k_tiles, 0x7FFFFFFF));
  p.w_tiles = static_cast<uint32_t>(std::min<int64_t>(w_tiles, 0x7FFFFFFF));
  p.wide = width % 16 == 0 && Aligned(buffers.col, 16) &&
           (!row_in_tile || Aligned(buffers.row, 16));
  p.strips = width % kStripCols == 0 && Aligned(buffers.col_scale, 16) &&
             (!row_in_tile || Aligned(buffers.row_scale, 16));
  if (row_in_tile && tile_sums != nullptr && problem.blocked % kBlock == 0) {
    p.sums = tile_sums;
    Mxfp8LaunchStatus status = LaunchTile<In, kFormat, true, true, true>(p, stream);
    status.tile_sums_written = status.ok;
    return status;
  }
  if (row_in_tile) return LaunchTile<In, kFormat, true, true>(p, stream);
  Mxfp8LaunchStatus status = LaunchTile<In, kFormat, false, true>(p, stream);
  if (status.ok && problem.rowwise) {
    status = LaunchRowScalar<In, kFormat>(problem, buffers, stream);
  }
  return status;
}

template <typename In>
Mxfp8LaunchStatus DispatchFormat(const Mxfp8QuantizeProblem& problem,
                                 const Mxfp8QuantizeBuffers& buffers,
                                 float* tile_sums, cudaStream_t stream) {
  if (problem.format == Fp8Format::kE4M3Fn) {
    return Run<In, Fp8Format::kE4M3Fn>(problem, buffers, tile_sums, stream);
  }
  return Run<In, Fp8Format::kE5M2>(problem, buffers, tile_sums, stream);
}

}  // namespace

bool Mxfp8RowTileSumsTake(const Mxfp8QuantizeProblem& problem,
                          const Mxfp8QuantizeBuffers& buffers) {
  const int vec = problem.input_type == InputType::kF32 ? F32In::kVec
                                                        : Bf16In::kVec;
  return RowTileSumsTake(problem, buffers, vec);
}

Mxfp8LaunchStatus Mxfp8Quantize(const Mxfp8QuantizeProblem& problem,
                                const Mxfp8QuantizeBuffers& buffers,
                                CUstream_st* stream, float* tile_sums) {
  const int64_t elements =
      problem.outer * problem.blocked * problem.inner * problem.last;
  if (elements == 0) return Mxfp8LaunchStatus{};  // every output is empty
  switch (problem.input_type) {
    case InputType::kF32:
      return DispatchFormat<F32In>(problem, buffers, tile_sums, stream);
    case InputType::kF16:
      return DispatchFormat<F16In>(problem, buffers, tile_sums, stream);
    case InputType::kBF16:
      return DispatchFormat<Bf16In>(problem, buffers, tile_sums, stream);
  }
  return Mxfp8LaunchStatus{false, 0, "unknown input type"};
}

}  // namespace eqx_quant::cuda
