// CUDA kernel of eqx_quant_grouped_nvfp4_quantize for sm_90a. Bit-exact with
// the CPU kernel (grouped/quantize_cpu.cc), which hands each group to
// the dense NVFP4 CPU kernel as the 2-D example (rows_g, N) with blocked axis
// 0 (K = rows_g, L = N), the group's amax for both parts, the group's key,
// offset 0 and global shape (rows_g, N): so the stochastic-rounding index of
// element (i, n) of the group is uint64(uint32(i)) * N + uint32(n), i local
// to the group. The colwise part is the group's (N, rows_g) T layout at
// start_g * N with (N, ceil(rows_g/16)) scales (already T_g's orientation).
// The block and element arithmetic is the dense CUDA kernels'
// (nvfp4/math_cuda.cuh, nvfp4/device_cuda.cuh, common/nvfp4_format.h).
// Compiled with --fmad=false --ftz=false --prec-div=true.
//
// The rowwise part for bf16 / f16 without 2D scaling (N % 16 == 0, aligned
// buffers; with or without stochastic rounding) runs RowOctetKernel instead
// (grouped/nvfp4_row_cuda.cu: TryNvfp4RowOctet, tried first); it writes
// the whole rowwise scale buffer itself, so no memset runs before it. It takes
// the rowwise part alone, and beside a colwise part when the problem is wide
// (TileKernel's grid below): TileKernel then writes the colwise part alone.
// That reads x twice, but TileKernel is bound by its instructions (its issue
// slots busy, DRAM mostly idle), not by memory. A problem with a
// colwise part, for the same inputs (N % 8 == 0; N % 16 == 0 with a rowwise
// part), at least 512 columns and a grid of at least one wave, runs
// GroupedPanelKernel instead (grouped/nvfp4_panel_cuda.cu): both parts
// in one read of x, or the colwise part alone.
//
// TileKernel (256 threads, one unit per CTA, see grouped/device_cuda.cuh for
// the units): a unit is 64 rows, aligned at its group's start, so rowwise
// blocks, colwise blocks and 2D 16x16 tiles (which start at the group's first
// row) never straddle units; a CTA takes up to kColTilesPerCta of its unit's
// 64-column tiles, finding the unit's group once. As in the dense TileKernel (nvfp4/tile_cuda.cu):
//   * the tile is loaded as f32 into shared memory (rows past the group and
//     columns past N are 0: zero padding changes no block amax), by 16-byte
//     loads when N is a multiple of a vector (16-bit inputs: the next column
//     tile's are loaded while this one is encoded), else by element;
//   * colwise / 2D phase: thread (kb, j) = (t / 64, t % 64) reads rows
//     16 kb .. 16 kb + 15 of column j; 2D: the 16x16 tile amax is a 16-lane
//     shuffle, published for the rowwise phase; colwise: the scale byte and
//     the 16 codes of the T row of column j;
//   * rowwise phase: thread (r, lb) = (t % 64, t / 64) encodes columns
//     16 lb .. 16 lb + 15 of row r;
//   * both phases stage their packed codes (8 bytes a block) and scale bytes
//     in shared memory, and after a barrier the CTA writes them out: the run
//     of a row / T row of the tile (up to 64 codes at any nibble offset:
//     rows_g and N are arbitrary) by 10 lanes, a destination word (8 codes)
//     each (StoreRunWord), 3 runs per warp; the 4 scale bytes of a row / T
//     row as one word (a thread per block storing its own 16 codes and scale
//     byte would write byte by byte at unaligned T rows, 32 lines per warp
//     store, bound by L2 store requests; a byte per lane, issue-bound).
// The codes are packed two per byte (F4E2M1FN); a word shared with another
// run (the run's first and last) is written by masked atomics.
// The encode multipliers of the 128 scale bytes of the group are a shared
// table. Shared element (r, c) is at r * 65 + c: conflict-free both ways.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "common/nvfp4_format.h"
#include "common/threefry.h"
#include "cuda/sm_count.h"
#include "grouped/device_cuda.cuh"
#include "grouped/quantize_cuda.h"
#include "nvfp4/device_cuda.cuh"

namespace eqx_quant::cuda {
namespace {

using namespace grouped_dev;  // NOLINT: the shared helpers of the grouped ops
using nvfp4::Bf16In;
using nvfp4::E4M3Byte;
using nvfp4::EncodeExact;
using nvfp4::EncodeFast;
using nvfp4::EncodeSrRun;
using nvfp4::F16In;
using nvfp4::F32In;
using nvfp4::kB;  // 16
using nvfp4::kF32Inf;
using nvfp4::MulRn;
using nvfp4::NanFreeKey;
using nvfp4::RawKey;
using nvfp4::PackNibbles8;
using nvfp4::LoadStreaming;
using nvfp4::Unpack;

constexpr int kTile = 64;  // tile rows and columns
constexpr int kPitch = kTile + 1;
// Column tiles per CTA (the launch's grid.y covers ceil(col_tiles / this)):
// LocateTile and the encode table are found once for all of them. A problem
// whose CTAs of kColTilesPerCta tiles would fill less than half of the
// resident CTA slots (one not "wide") gets a CTA per column tile instead, so
// that its few units' tiles run side by side rather than in turn; a wide
// one keeps 4, which is faster there.
constexpr int64_t kColTilesPerCta = 4;
// Staged codes: a line (a row, or a T row) of the tile is 64 codes = 8
// words, block b in words 2b, 2b + 1; lines 10 words apart, so that a warp's
// 8-byte staging stores (lanes = consecutive lines, one block) take the
// minimum 2 wavefronts. A run's store reads one word before and one word
// after its 8 (masked off): the area starts with 2 guard words (line bases
// stay 8-byte aligned), and the last line's padding covers the end.
constexpr int kLineWords = 10;
constexpr int kStageWords = 2 + 2 * kTile * kLineWords;
// The store of a run: a lane per destination word (8 codes), up to 9 words
// (64 codes at any nibble offset), so 3 runs per warp.
constexpr int kLanesPerRun = 10;
constexpr int kRunsPerWarp = 3;

struct Nvfp4Params {
  const void* x;
  const float* amax;       // batch x G
  const uint32_t* keys;    // batch x G x 2
  const int32_t* group_sizes;
  uint8_t* row;
  uint8_t* row_scale;
  uint8_t* col;
  uint8_t* col_scale;
  int64_t batch;
  RowSpec rs;    // R, U
  int64_t rows;  // R
  int64_t cols;  // N
  int64_t groups;
  int64_t row_scale_bytes;
  int64_t col_scale_bytes;
  int64_t col_tiles;    // ceil(N / 64)
  int64_t group_units;  // W(R, G, 64)
  bool use_2d;
  bool vec_load;  // N % In::kVec == 0 and x 16-byte aligned: 16-byte loads
};

// The SR index of element (i, n) of a group's (rows, cols) matrix, row-major,
// as the dense kernels' SrTerm sums compute it with offset 0: rowwise (i, n)
// of (rows_g, N), colwise (n, i) of the T layout (N, rows_g).
__device__ __forceinline__ uint64_t SrIndex(int64_t i, int64_t n,
                                            int64_t cols) {
  return static_cast<uint64_t>(static_cast<uint32_t>(i)) *
             static_cast<uint64_t>(cols) +
         static_cast<uint64_t>(static_cast<uint32_t>(n));
}

// Word k of a run of `count` (<= 64) codes stored to the elements e0 ..
// e0 + count - 1 of the packed buffer `base` (element e is nibble e % 8 of
// word e / 8): code c is nibble c % 8 of line[c / 8] (line == nullptr:
// zeros). A word whose 8 nibbles are all the run's is a plain store; the
// first and last words, which may hold a neighbouring run's codes, are
// written by masked atomics. Nothing is written for k past the run.
__device__ __forceinline__ void StoreRunWord(uint8_t* base, int64_t e0,
                                             int count, const uint32_t* line,
                                             int k) {
  const int64_t word = (e0 >> 3) + k;
  if (word > (e0 + count - 1) >> 3) return;
  const int d = static_cast<int>(word * 8 - e0);  // its first code, > -8
  uint32_t value = 0;
  if (line != nullptr) {  // codes d .. d + 7: bits 4d .. 4d + 31 of the line
    const int bit = 4 * d + 32;
    value = __funnelshift_r(line[(bit >> 5) - 1], line[bit >> 5], bit & 31);
  }
  const int first = max(0, -d);          // the run's nibbles of the word:
  const int end = min(8, count - d);     // first .. end - 1
  uint32_t* dst = reinterpret_cast<uint32_t*>(base) + word;
  if (first == 0 && end == 8) {
    *dst = value;
    return;
  }
  const uint32_t mask = ((end - first == 8 ? 0u : 1u << (4 * (end - first))) - 1u)
                        << (4 * first);
  atomicAnd(dst, ~mask);
  atomicOr(dst, value & mask);
}

// Resident CTAs per SM: 3 without stochastic rounding (up to 85 registers:
// at 4 CTAs' 64, the prefetched vectors and the store phase spill 24 bytes
// in the loop; at 80 the one-part kernels keep one constant of the encode
// table's division in local memory, stored once and loaded once per
// example), 2 with it.
template <bool kSr>
constexpr int kGroupedNvfp4MinBlocks = kSr ? 2 : 3;

template <typename In, bool kRow, bool kCol, bool kSr>
__global__ void __launch_bounds__(kThreads, kGroupedNvfp4MinBlocks<kSr>)
    Nvfp4TileKernel(const __grid_constant__ Nvfp4Params p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;  // elements per 16-byte vector
  constexpr int kVecPerRow = kTile / kVec;
  constexpr int kVecPerThread = kTile * kVecPerRow / kThreads;
  constexpr int kRuns = (kRow ? kTile : 0) + (kCol ? kTile : 0);
  __shared__ float tile[kTile * kPitch];
  __shared__ uint32_t tile_key[kTile / kB][kTile / kB];
  __shared__ float enc_table[128];
  __shared__ LocateShared sh;
  // The tile's packed codes and scale bytes: [0] rowwise (row r), [1]
  // colwise (T row j); scale byte b of a row is block b.
  __shared__ __align__(8) uint32_t staged_words[kStageWords];
  __shared__ uint32_t staged_scales[2][kTile];

  const int t = threadIdx.x;
  const int lane = t % 32;
  const int warp = t / 32;
  // Line r of part 0 (rowwise) or 1 (colwise) of the staging area.
  auto staged_line = [&](int part, int r) {
    return &staged_words[2 + (part * kTile + r) * kLineWords];
  };
  // This lane's first run of a store phase (kLanesPerRun lanes each; none
  // for the last two lanes), its next one kRunStep runs on, and its word of
  // the run (computed where used: registers are short).
  auto first_run = [&] {
    return lane < kRunsPerWarp * kLanesPerRun
               ? warp * kRunsPerWarp + lane / kLanesPerRun
               : 1 << 30;
  };
  constexpr int kRunStep = kWarps * kRunsPerWarp;
  const int64_t R = p.rows;
  const int64_t N = p.cols;
  const int64_t G = p.groups;
  const int64_t unit = blockIdx.x;
  const int64_t elements = R * N;

  for (int64_t ex = blockIdx.z; ex < p.batch; ex += gridDim.z) {
    const int32_t* sizes = p.group_sizes + ex * G;
    if (unit >= p.group_units) {  // a tail unit: zeros, a run per row
      const int64_t end = GroupsEnd(sizes, G, p.rs, sh.warp_sums);
      const int64_t first = end + (unit - p.group_units) * kTile;
      const int64_t last = min(R, first + kTile);
      for (int64_t ct = blockIdx.y; ct < p.col_tiles; ct += gridDim.y) {
        const int64_t col0 = ct * kTile;
        const int width = static_cast<int>(min(int64_t{kTile}, N - col0));
        for (int64_t r = first + first_run(); r < last; r += kRunStep) {
          const int64_t e0 = ex * elements + r * N + col0;
          const int k = lane % kLanesPerRun;
          if (kRow) StoreRunWord(p.row, e0, width, nullptr, k);
          if (kCol) StoreRunWord(p.col, e0, width, nullptr, k);
        }
      }
      continue;
    }

    // The unit's group tile: the same for all of this CTA's column tiles.
    RegionSpec regions;
    regions.rowwise = kRow;
    regions.colwise = kCol;
    regions.block = grouped::kNvfp4Block;
    LocateTile<kTile>(sizes, G, p.rs, N, regions, unit, sh);
    const GroupTile& gt = sh.found;  // read where used: fewer registers
    if (gt.group < 0) continue;
    const int64_t first_local = gt.tile * kTile;  // in the group
    const int64_t row0 = gt.start + first_local;  // in the example
    const int tile_rows =
        static_cast<int>(min(int64_t{kTile}, gt.rows - first_local));
    const int64_t slot = ex * G + gt.group;

    // The group's tensor scale (both parts use the group's amax) and the
    // encode multipliers of the 128 scale bytes (in before the first
    // column tile's barrier; LocateTile's barrier freed the table).
    const Nvfp4TensorScale ts = MakeNvfp4TensorScale(p.amax[slot]);
    if (t < 128) {
      enc_table[t] = Nvfp4EncodeMultiplier(static_cast<uint8_t>(t), ts);
    }
    uint32_t key0 = 0;
    uint32_t key1 = 0;
    if constexpr (kSr) {
      key0 = p.keys[2 * slot];
      key1 = p.keys[2 * slot + 1];
    }

    // The unit's rows of x. Vector loads of 16-bit inputs: the next column
    // tile's vectors are loaded into registers while this one is encoded
    // (f32 inputs' 16 registers of vectors would spill: loaded in turn).
    const Storage* x =
        static_cast<const Storage*>(p.x) + ex * elements + row0 * N;
    uint4 next[kVecPerThread];
    auto load_vectors = [&](int64_t ct) {
      const int64_t col0 = ct * kTile;
#pragma unroll
      for (int i = 0; i < kVecPerThread; ++i) {
        const int q = t + i * kThreads;
        const int r = q / kVecPerRow;
        const int c = q % kVecPerRow * kVec;
        next[i] = make_uint4(0u, 0u, 0u, 0u);
        if (ct < p.col_tiles && r < tile_rows && col0 + c < N) {
          next[i] = LoadStreaming(x + r * N + col0 + c);
        }
      }
    };
    constexpr bool kPrefetch = kVecPerThread <= 2;
    if (kPrefetch && p.vec_load) load_vectors(blockIdx.y);

    for (int64_t ct = blockIdx.y; ct < p.col_tiles; ct += gridDim.y) {
      const int64_t col0 = ct * kTile;
      const int tile_cols = static_cast<int>(min(int64_t{kTile}, N - col0));

      // The tile, as f32 (zeros outside the group and past N). The last
      // column tile's readers of `tile` passed its staging barrier.
      if (p.vec_load) {
        if constexpr (!kPrefetch) load_vectors(ct);
#pragma unroll
        for (int i = 0; i < kVecPerThread; ++i) {
          const int q = t + i * kThreads;
          const uint32_t w[4] = {next[i].x, next[i].y, next[i].z, next[i].w};
          float f[kVec];
          Unpack<In, kVec>(w, f);
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            tile[q / kVecPerRow * kPitch + q % kVecPerRow * kVec + e] = f[e];
          }
        }
        if constexpr (kPrefetch) load_vectors(ct + gridDim.y);
      } else {
        const int c = t % kTile;
        const Storage* src = x + col0 + c;
        Storage s[kTile * kTile / kThreads];
#pragma unroll
        for (int j = 0; j < kTile * kTile / kThreads; ++j) {
          const int r = t / kTile + j * (kThreads / kTile);
          s[j] = r < tile_rows && c < tile_cols ? src[r * N] : Storage(0);
        }
#pragma unroll
        for (int j = 0; j < kTile * kTile / kThreads; ++j) {
          const int r = t / kTile + j * (kThreads / kTile);
          tile[r * kPitch + c] = In::Convert(s[j]);
        }
      }
      __syncthreads();  // the tile and enc_table are in; the last column
                        // tile's readers of the staging areas are done

      // Colwise / 2D: thread (kb, j) has rows 16 kb .. 16 kb + 15 of column j.
      if (kCol || p.use_2d) {
        const int kb = t / kTile;
        const int j = t % kTile;
        float v[kB];
#pragma unroll
        for (int i = 0; i < kB; ++i) v[i] = tile[(kb * kB + i) * kPitch + j];
        uint32_t tile_amax = 0;
        if (p.use_2d) {  // all lanes: the 16x16 tile's amax
          tile_amax = NanFreeKey<kB>(v);
#pragma unroll
          for (int s = 1; s < kB; s *= 2) {
            tile_amax =
                max(tile_amax, __shfl_xor_sync(0xFFFFFFFFu, tile_amax, s));
          }
          if (kRow && j % kB == 0) tile_key[kb][j / kB] = tile_amax;
        }
        // (kb is the same in a warp: its lanes are 32 columns of one block.)
        uint32_t col_sdb = 0;  // 0 for a block past the group's rows
        if (kCol && kb * kB < tile_rows) {
          const uint32_t raw = RawKey<kB>(v);
          const bool has_nan = raw > kF32Inf;
          const uint32_t key =
              p.use_2d ? tile_amax : (has_nan ? NanFreeKey<kB>(v) : raw);
          const uint32_t sdb = E4M3Byte(MulRn(__uint_as_float(key), ts.factor));
          const float enc = enc_table[sdb & 127u];
          const int64_t n = col0 + j;
          const int64_t i0 = first_local + kb * kB;  // first row, in the group
          uint32_t q[4];
          if constexpr (kSr) {  // rows i0 .. i0 + 15 of T-layout row n
            EncodeSrRun<kB>(v, enc, key0, key1, kColwiseStream,
                            SrIndex(n, 0, gt.rows), static_cast<uint32_t>(i0),
                            has_nan, q);
          } else if (has_nan) {
            EncodeExact<kB>(v, enc, q);
          } else {
            EncodeFast<kB>(v, enc, q);
          }
          *reinterpret_cast<uint2*>(staged_line(1, j) + 2 * kb) =
              make_uint2(PackNibbles8(q[0], q[1]), PackNibbles8(q[2], q[3]));
          col_sdb = sdb;
        }
        if (kCol) {
          reinterpret_cast<uint8_t*>(&staged_scales[1][j])[kb] =
              static_cast<uint8_t>(col_sdb);
        }
      }

      // Rowwise: thread (r, lb) has columns 16 lb .. 16 lb + 15 of row r.
      if constexpr (kRow) {
        if (p.use_2d) __syncthreads();  // tile_key is in
        const int r = t % kTile;
        const int lb = t / kTile;
        uint32_t row_sdb = 0;  // 0 for a block past N
        if (r < tile_rows && lb * kB < tile_cols) {
          float v[kB];
#pragma unroll
          for (int e = 0; e < kB; ++e) v[e] = tile[r * kPitch + lb * kB + e];
          const uint32_t raw = RawKey<kB>(v);
          const bool has_nan = raw > kF32Inf;
          const uint32_t key = p.use_2d ? tile_key[r / kB][lb]
                                        : (has_nan ? NanFreeKey<kB>(v) : raw);
          const uint32_t sdb = E4M3Byte(MulRn(__uint_as_float(key), ts.factor));
          const float enc = enc_table[sdb & 127u];
          const int64_t i = first_local + r;  // in the group
          const int64_t n0 = col0 + lb * kB;
          uint32_t q[4];
          if constexpr (kSr) {
            EncodeSrRun<kB>(v, enc, key0, key1, kRowwiseStream,
                            SrIndex(i, 0, N), static_cast<uint32_t>(n0),
                            has_nan, q);
          } else if (has_nan) {
            EncodeExact<kB>(v, enc, q);
          } else {
            EncodeFast<kB>(v, enc, q);
          }
          *reinterpret_cast<uint2*>(staged_line(0, r) + 2 * lb) =
              make_uint2(PackNibbles8(q[0], q[1]), PackNibbles8(q[2], q[3]));
          row_sdb = sdb;
        }
        reinterpret_cast<uint8_t*>(&staged_scales[0][r])[lb] =
            static_cast<uint8_t>(row_sdb);
      }
      __syncthreads();  // the staged codes and scales are in

      // The codes: a run per row (rowwise) and per T row (colwise), runs
      // q < 64 rowwise when both parts are written.
      for (int q = first_run(); q < kRuns; q += kRunStep) {
        const bool colwise_run = kCol && (!kRow || q >= kTile);
        const int line = kRow && kCol && colwise_run ? q - kTile : q;
        const int run_lane = lane % kLanesPerRun;
        if (colwise_run) {
          // T row n of the group is its elements start_g * N + n * rows_g ..
          if (line < tile_cols) {
            StoreRunWord(p.col,
                         ex * elements + gt.start * N + first_local +
                             (col0 + line) * gt.rows,
                         tile_rows, staged_line(1, line), run_lane);
          }
        } else if (line < tile_rows) {
          StoreRunWord(p.row, ex * elements + (row0 + line) * N + col0,
                       tile_cols, staged_line(0, line), run_lane);
        }
      }
      // The scales: the 4 blocks of a row (T row) of the tile are 4
      // consecutive, 4-byte aligned bytes of the swizzled layout (col0 / 16
      // and first_local / 16 are multiples of 4); a block past N (past the
      // group's rows) is the region's zero padding.
      if (kRow && t < tile_rows) {
        const int64_t q_cols =
            grouped::PadTo(grouped::CeilDiv(N, int64_t{kB}), 4);
        *reinterpret_cast<uint32_t*>(
            p.row_scale + ex * p.row_scale_bytes + gt.row_region +
            grouped::SwizzleOffset(first_local + t, col0 / kB, q_cols)) =
            staged_scales[0][t];
      }
      if (kCol && t >= kTile && t - kTile < tile_cols) {
        const int j = t - kTile;
        const int64_t q_cols =
            grouped::PadTo(grouped::CeilDiv(gt.rows, int64_t{kB}), 4);
        *reinterpret_cast<uint32_t*>(
            p.col_scale + ex * p.col_scale_bytes + gt.col_region +
            grouped::SwizzleOffset(col0 + j, first_local / kB, q_cols)) =
            staged_scales[1][j];
      }
    }  // column tiles
    // The next LocateTile starts with a barrier: tile, tile_key, enc_table
    // and the staging areas are free by then.
  }  // examples
}

// ---------------------------------------------------------------------------
// Host side.

template <typename In, bool kSr>
GroupedLaunchStatus LaunchLayout(const Nvfp4Params& p, bool rowwise,
                                 bool colwise, dim3 grid,
                                 cudaStream_t stream) {
  if (rowwise && colwise) {
    Nvfp4TileKernel<In, true, true, kSr><<<grid, kThreads, 0, stream>>>(p);
  } else if (rowwise) {
    Nvfp4TileKernel<In, true, false, kSr><<<grid, kThreads, 0, stream>>>(p);
  } else {
    Nvfp4TileKernel<In, false, true, kSr><<<grid, kThreads, 0, stream>>>(p);
  }
  return CheckLaunch("launching the grouped NVFP4 TileKernel");
}

template <typename In>
GroupedLaunchStatus LaunchInput(const Nvfp4Params& p, bool rowwise,
                                bool colwise, bool sr, dim3 grid,
                                cudaStream_t stream) {
  return sr ? LaunchLayout<In, true>(p, rowwise, colwise, grid, stream)
            : LaunchLayout<In, false>(p, rowwise, colwise, grid, stream);
}

}  // namespace

GroupedLaunchStatus GroupedNvfp4Quantize(
    const GroupedNvfp4QuantizeProblem& problem,
    const GroupedNvfp4QuantizeBuffers& buffers, CUstream_st* stream) {
  const GroupedView& v = problem.view;
  if (v.batch == 0) return GroupedLaunchStatus{};
  if (v.rows * v.cols == 0) return ZeroScaleBuffers(problem, buffers, stream);
  if (Nvfp4PanelsApply(problem, buffers)) {
    const GroupedLaunchStatus status =
        ZeroScaleBuffers(problem, buffers, stream);
    return status.ok ? LaunchNvfp4Panels(problem, buffers, stream) : status;
  }

  Nvfp4Params p{};
  dim3 grid;
  if (!TileGrid(v.rows, v.cols, v.groups, kTile, kTile, v.batch,
                &p.group_units, &p.col_tiles, &grid)) {
    return Unsupported(
        "the tensor is too large (2^31 row tiles or more per example)");
  }
  const bool sr = problem.stochastic_rounding;
  const int64_t wide_ctas =
      p.group_units * grouped::CeilDiv(p.col_tiles, kColTilesPerCta);
  const int64_t resident =
      int64_t{SmCount()} * (sr ? kGroupedNvfp4MinBlocks<true>
                               : kGroupedNvfp4MinBlocks<false>);
  const bool wide = 2 * wide_ctas >= resident;
  grid.y = static_cast<unsigned>(std::clamp<int64_t>(
      grouped::CeilDiv(p.col_tiles, wide ? kColTilesPerCta : 1), 1, 65535));

  // The rowwise part by RowOctetKernel if it suits (16-bit input, no 2D):
  // alone, or beside a colwise part of a wide problem, which TileKernel
  // then writes alone (two reads of x, but TileKernel is bound by its
  // instructions, not by memory). `tiled`: the parts left to TileKernel.
  GroupedNvfp4QuantizeProblem tiled = problem;
  if (problem.rowwise && (!problem.colwise || wide)) {
    GroupedNvfp4QuantizeProblem row_part = problem;
    row_part.colwise = false;
    bool taken = false;
    const GroupedLaunchStatus octets =
        TryNvfp4RowOctet(row_part, buffers, stream, &taken);
    if (!octets.ok || (taken && !problem.colwise)) return octets;
    tiled.rowwise = !taken;
  }
  GroupedLaunchStatus status = ZeroScaleBuffers(tiled, buffers, stream);
  if (!status.ok) return status;

  p.x = buffers.x;
  p.amax = buffers.amax;
  p.keys = buffers.keys;
  p.group_sizes = buffers.group_sizes;
  p.row = tiled.rowwise ? buffers.row : nullptr;
  p.row_scale = tiled.rowwise ? buffers.row_scale : nullptr;
  p.col = tiled.colwise ? buffers.col : nullptr;
  p.col_scale = tiled.colwise ? buffers.col_scale : nullptr;
  p.batch = v.batch;
  p.rows = v.rows;
  p.cols = v.cols;
  p.groups = v.groups;
  p.rs = RowSpec::Make(v.rows, v.rows_per_unit);
  p.row_scale_bytes = problem.row_scale_bytes;
  p.col_scale_bytes = problem.col_scale_bytes;
  p.use_2d = problem.use_2d;
  const int64_t vec = v.input_type == InputType::kF32 ? F32In::kVec : Bf16In::kVec;
  p.vec_load = v.cols % vec == 0 && nvfp4::IsAligned(buffers.x, 16);
  switch (v.input_type) {
    case InputType::kF32:
      return LaunchInput<F32In>(p, tiled.rowwise, tiled.colwise, sr, grid,
                                stream);
    case InputType::kF16:
      return LaunchInput<F16In>(p, tiled.rowwise, tiled.colwise, sr, grid,
                                stream);
    case InputType::kBF16:
      return LaunchInput<Bf16In>(p, tiled.rowwise, tiled.colwise, sr, grid,
                                 stream);
  }
  return Unsupported("unknown input type");
}

}  // namespace eqx_quant::cuda
