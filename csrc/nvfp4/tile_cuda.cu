// CUDA kernel of eqx_quant_nvfp4_quantize for sm_90a: every problem with a
// colwise part or 2D scaling that PanelKernel (nvfp4/panel_cuda.cu, the
// aligned colwise problems: 1D, and 2D of 16-bit input without SR) does not
// take; nvfp4/quantize_cuda.cu has the rowwise-only kernels and the
// semantics. Bit-exact with the CPU kernel.
//
// TileKernel (256 threads, persistent CTAs, nothing allocated): a tile is 64
// k-rows (one a) x 64 l (one c) of an example, so rowwise blocks, colwise
// blocks and 2D tiles never straddle tiles; rows beyond K and columns beyond
// L are zero in shared memory (zero padding changes no block amax) and are
// not written. The next tile is fetched while the current one is processed
// (three buffers; a barrier before the encode phases, one before the stores
// and, 2D rowwise, one for the tile amax; none ends an iteration): cp.async
// of 16-byte row vectors when L is a multiple of a vector and x is 16-byte
// aligned, else scalar loads stored to shared memory.
// Launched with programmatic dependent launch: the first tile is fetched
// before the wait for the amax kernel. Codes are stored packed (F4E2M1FN:
// 16 codes = 8 bytes; nibble stores where a run shares a byte).
// Shared-memory rows are 64 elements + 16 bytes, 16 mod 128 bytes apart, so
// both the column reads (consecutive lanes, consecutive columns) and the
// 16-byte row-block reads (consecutive lanes, consecutive rows) are free of
// bank conflicts.
//   * Colwise phase (colwise or 2D): thread (kb, j) = (t / 64, t % 64) reads
//     rows 16 kb .. 16 kb + 15 of column j. 2D: the tile amax is the max of
//     16 column maxima, a 16-lane shuffle (a warp is 32 columns of one kb),
//     published in shared memory for the rowwise phase. Colwise: the RHT
//     butterfly in registers (use_rht), the block scale, the codes of 16
//     consecutive k of the T layout (c, l, a, k); the 16 packed codes (8
//     bytes) and the scale byte are staged in shared memory (Staging). SR:
//     the 16 elements have consecutive colwise indices (K is the last dim of
//     the T layout): two Threefry calls (EncodeSrRun).
//   * Rowwise phase: thread (r, lb) = (t % 64, t / 64) encodes columns
//     16 lb .. 16 lb + 15 of row r (two or four 16-byte shared loads) and
//     stages 16 packed codes and a scale byte.
//   * Stores, after a barrier: a tile row's (rowwise) or T-layout row's
//     (colwise) up to 64 codes are one contiguous run, written by two threads
//     (StoreStagedRun: one 16-byte streaming store each where the run is
//     whole, starts a byte and is aligned; else 8- or 4-byte ones; else byte
//     stores, and nibble atomics for a byte shared with another run), and its
//     4 scale bytes are one 4-byte store where aligned (per-thread 8-byte
//     code and 1-byte scale stores, a warp's lanes 32 rows or T rows apart,
//     are ~1,024 partial-sector writes per tile that keep L2 busy and DRAM
//     idle).
// The encode multipliers of the 128 possible scale bytes of the current
// example are a shared table (the IEEE divisions run once per example).
// No kernel spills (ptxas -warn-spills is on in CMake).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/nvfp4_format.h"
#include "common/nvfp4_problem.h"
#include "common/rht.h"
#include "common/threefry.h"
#include "nvfp4/device_cuda.cuh"
#include "nvfp4/quantize_cuda.h"

namespace eqx_quant::cuda::nvfp4 {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 64;  // tile rows (k) and columns (l)
// Tile buffers: tile g + 1 is fetched into the buffer that tile g - 2 was
// read from, so the barrier every thread passes before reading tile g (all
// of tile g - 1's readers have finished, and so those of g - 2) also frees
// the buffer, and no barrier ends an iteration.
constexpr int kBuffers = 3;

struct TileParams {
  const void* x;
  const float* amax;
  const float* col_amax;
  const uint32_t* key;
  uint8_t* row;
  uint8_t* row_scale;
  uint8_t* col;
  uint8_t* col_scale;
  int64_t a, k, c, l;  // the (A, K, C, L) view of an example
  int64_t l_blocks;    // ceil(L / 16)
  int64_t k_blocks;    // ceil(K / 16)
  int64_t cl;          // C * L: x / row elements between consecutive k
  int64_t clb;         // C * l_blocks: row_scale bytes between consecutive k
  int64_t ak;          // A * K: col bytes between consecutive l
  int64_t akb;         // A * k_blocks: col_scale bytes between consecutive l
  uint64_t l_tiles;    // ceil(L / 64)
  uint64_t k_tiles;    // ceil(K / 64)
  uint64_t total_tiles;  // batch * A * k_tiles * C * l_tiles
  bool narrow;         // total_tiles < 2^32: 32-bit divisions
  bool rowwise, colwise, use_2d;
  bool vec_load;  // L % kVec == 0 and x 16-byte aligned: cp.async rows
  int k_axis;     // index of K in S (for the SR index)
  float rht_factor[kRhtSize];  // R[i][0]
  SrLayout sr;
};

// Tile g (l-tile fastest, then c, then k-tile, then a, then the example):
// element (r, j) of the tile (k = k0 + r, l = l0 + j) is x[x_off + r * CL +
// j]; its row code is row[x_off + r * CL + j], its row scale
// row_scale[rs_off + r * CLB + j / 16]; its col code col[col_off + j * AK +
// r], its col scale col_scale[cs_off + j * AKB + r / 16].
struct TileAt {
  int64_t ex;
  int64_t x_off;
  int64_t rs_off;
  int64_t col_off;
  int64_t cs_off;
  int32_t rows;  // valid rows: min(64, K - k0)
  int32_t cols;  // valid columns: min(64, L - l0)
  int64_t a, c, k0, l0;  // for the SR index
};

__device__ __forceinline__ TileAt Locate(const TileParams& p, uint64_t g) {
  int64_t lt, c, kt, a, ex;
  int64_t rest = static_cast<int64_t>(g);
  rest = DivMod(rest, static_cast<int64_t>(p.l_tiles), p.narrow, lt);
  rest = DivMod(rest, p.c, p.narrow, c);
  rest = DivMod(rest, static_cast<int64_t>(p.k_tiles), p.narrow, kt);
  ex = DivMod(rest, p.a, p.narrow, a);
  TileAt at;
  at.ex = ex;
  at.a = a;
  at.c = c;
  at.k0 = kt * kTile;
  at.l0 = lt * kTile;
  const int64_t line = ((ex * p.a + a) * p.k + at.k0) * p.c + c;
  at.x_off = line * p.l + at.l0;
  at.rs_off = line * p.l_blocks + at.l0 / kB;
  const int64_t column = ((ex * p.c + c) * p.l + at.l0) * p.a + a;
  at.col_off = column * p.k + at.k0;
  at.cs_off = column * p.k_blocks + at.k0 / kB;
  at.rows = static_cast<int32_t>(min(int64_t{kTile}, p.k - at.k0));
  at.cols = static_cast<int32_t>(min(int64_t{kTile}, p.l - at.l0));
  return at;
}

// The outputs of a tile, staged in shared memory between the encode phases
// and the CTA's stores (StoreStagedRun, the end of TileKernel's iteration).
// Line i of part 0 is tile row i (rowwise), of part 1 T-layout row i
// (colwise, column l0 + i): 64 packed codes, 32 bytes, whose 8-byte chunk c
// (the 16 codes of block c) lies at chunk StagedChunk(i, c), and the 4 block
// scale bytes, block c in byte c of scales[part][i].
struct Staging {
  uint8_t codes[2][kTile][kTile / 2];
  uint32_t scales[2][kTile];
};

// The chunk positions are swizzled so that both accesses are free of bank
// conflicts: the encoders' 8-byte stores (a half-warp: 16 consecutive lines,
// one c; line % 4 and line / 4 % 4 give all 16 bank pairs) and the storers'
// 16-byte loads (a quarter-warp: 4 consecutive lines, 128 contiguous bytes).
__device__ __forceinline__ int StagedChunk(int line, int c) {
  return c ^ ((line >> 2) & 3);
}

// Codes 32 h .. 32 h + 31 of staged line `line` of `codes` (chunks 2 h and
// 2 h + 1) as 16 bytes.
__device__ __forceinline__ uint4 StagedHalf(const uint8_t (*codes)[kTile / 2],
                                            int line, int h) {
  const int swizzle = (line >> 2) & 3;
  const uint4 v = *reinterpret_cast<const uint4*>(
      &codes[line][16 * (h ^ (swizzle >> 1))]);
  return swizzle & 1 ? make_uint4(v.z, v.w, v.x, v.y) : v;
}

// 32 packed codes (code i: nibble i % 2 of byte i / 2 of w) to the elements
// index .. index + count - 1 (count <= 32) of the packed buffer `base`: when
// the run is whole and starts a byte, one 16-byte streaming store where
// aligned, else 8- or 4-byte ones; otherwise byte stores, and a nibble store
// (StoreNibble) for a byte shared with a neighbouring run (an odd index or an
// odd end: the run of the next or previous row or T-row, possibly another
// tile's, or the other half of the same line).
__device__ __forceinline__ void StoreStagedRun(uint8_t* base, int64_t index,
                                               const uint4& w, int count) {
  uint8_t* dst = base + (index >> 1);
  const uintptr_t address = reinterpret_cast<uintptr_t>(dst);
  const int s = static_cast<int>(index & 1);  // nibble of code 0 in dst[0]
  if (count == 2 * kB && s == 0) {
    if (address % 16 == 0) {
      __stcs(reinterpret_cast<uint4*>(dst), w);
      return;
    }
    if (address % 8 == 0) {
      __stcs(reinterpret_cast<uint2*>(dst), make_uint2(w.x, w.y));
      __stcs(reinterpret_cast<uint2*>(dst + 8), make_uint2(w.z, w.w));
      return;
    }
    if (address % 4 == 0) {
      uint32_t* word = reinterpret_cast<uint32_t*>(dst);
      __stcs(word, w.x);
      __stcs(word + 1, w.y);
      __stcs(word + 2, w.z);
      __stcs(word + 3, w.w);
      return;
    }
  }
  // The 17 bytes dst[0..16] as the codes shifted by s nibbles: nibble n of
  // `bytes` is code n - s.
  const unsigned shift = 4u * static_cast<unsigned>(s);
  const uint32_t bytes[5] = {
      w.x << shift, __funnelshift_l(w.x, w.y, shift),
      __funnelshift_l(w.y, w.z, shift), __funnelshift_l(w.z, w.w, shift),
      __funnelshift_l(w.w, 0u, shift)};
#pragma unroll
  for (int b = 0; b <= kB; ++b) {
    const int n0 = 2 * b - s;  // the codes of the two nibbles of dst[b]
    const bool own0 = n0 >= 0 && n0 < count;
    const bool own1 = n0 + 1 >= 0 && n0 + 1 < count;
    const uint32_t byte = (bytes[b / 4] >> (8 * (b % 4))) & 0xFFu;
    if (own0 && own1) {
      dst[b] = static_cast<uint8_t>(byte);
    } else if (own0 || own1) {
      StoreNibble(dst + b, own1, own1 ? byte >> 4 : byte);
    }
  }
}

// Resident CTAs per SM: 3 without SR (up to 85 registers, so the tile's
// place stays in registers; at 4 CTAs and 64 registers each use waits for
// a shared-memory load), 2 with SR.
template <bool kSr>
constexpr int kTileMinBlocks = kSr ? kQuantizeMinBlocks<kSr> : 3;

template <typename In, bool kRht, bool kSr>
__global__ void __launch_bounds__(kThreads, kTileMinBlocks<kSr>)
    TileKernel(const __grid_constant__ TileParams p) {
  using Storage = typename In::Storage;
  constexpr int kSize = sizeof(Storage);
  constexpr int kStride = kTile * kSize + 16;  // bytes per row: 16 mod 128
  constexpr int kVec = In::kVec;
  constexpr int kVecPerRow = kTile / kVec;
  constexpr int kVecPerThread = kTile * kVecPerRow / kThreads;
  constexpr int kElemPerThread = kTile * kTile / kThreads;
  __shared__ __align__(16) uint8_t tile[kBuffers][kTile * kStride];
  __shared__ TileAt tile_at[kBuffers];  // where the tile in each buffer lies
  __shared__ uint32_t tile_key[kTile / kB][kTile / kB];
  // The encode multipliers of the 128 scale bytes (rowwise, colwise) of the
  // current example (an IEEE division each: computed once per example).
  __shared__ float enc_table[2][128];
  __shared__ __align__(16) Staging stage;

  const int t = threadIdx.x;
  const Storage* x = static_cast<const Storage*>(p.x);

  // Tile g into buffer b: cp.async rows, or scalar loads stored to shared.
  auto fetch = [&](uint64_t g, int b) {
    const TileAt at = Locate(p, g);
    if (t == 0) tile_at[b] = at;
    const Storage* src = x + at.x_off;
    if (p.vec_load) {
#pragma unroll
      for (int j = 0; j < kVecPerThread; ++j) {
        const int q = t + j * kThreads;
        const int r = q / kVecPerRow;
        const int v = q % kVecPerRow;
        const bool valid = r < at.rows && v * kVec < at.cols;
        AsyncCopy16(&tile[b][r * kStride + v * 16],
                    valid ? src + r * p.cl + v * kVec : x, valid);
      }
    } else {
      Storage s[kElemPerThread];
#pragma unroll
      for (int j = 0; j < kElemPerThread; ++j) {
        const int r = t / kTile + j * (kThreads / kTile);
        const int col = t % kTile;
        s[j] = r < at.rows && col < at.cols ? src[r * p.cl + col] : Storage(0);
      }
#pragma unroll
      for (int j = 0; j < kElemPerThread; ++j) {
        const int r = t / kTile + j * (kThreads / kTile);
        *reinterpret_cast<Storage*>(
            &tile[b][r * kStride + (t % kTile) * kSize]) = s[j];
      }
    }
  };

  int64_t cached_ex = -1;
  float row_factor = 0.0f;  // block amax -> scale byte multipliers
  float col_factor = 0.0f;
  uint32_t key0 = 0;
  uint32_t key1 = 0;

  int cur = 0;
  uint64_t g = blockIdx.x;
  if (g < p.total_tiles) fetch(g, 0);
  AsyncCommit();
  // The amax kernel (programmatic launch) has finished from here on; the
  // first tile of x, which it does not write, is already on its way.
  WaitForPrerequisiteGrids();
  for (; g < p.total_tiles; g += gridDim.x, cur = (cur + 1) % kBuffers) {
    if (g + gridDim.x < p.total_tiles) {
      fetch(g + gridDim.x, (cur + 1) % kBuffers);
    }
    AsyncCommit();
    AsyncWaitGroup<1>();      // this thread's part of tile g is in
    __syncthreads();          // everyone's part is, and tile_at[cur]; every
                              // thread has left the last iteration

    const int64_t ex = tile_at[cur].ex;
    if (ex != cached_ex) {  // the same in the whole CTA
      cached_ex = ex;
      const Nvfp4TensorScale row_t = MakeNvfp4TensorScale(p.amax[ex]);
      const Nvfp4TensorScale col_t = MakeNvfp4TensorScale(p.col_amax[ex]);
      row_factor = row_t.factor;
      col_factor = col_t.factor;
      const int part = t / 128;
      enc_table[part][t % 128] = Nvfp4EncodeMultiplier(
          static_cast<uint8_t>(t % 128), part == 0 ? row_t : col_t);
      if (kSr) {
        key0 = p.key[2 * ex];
        key1 = p.key[2 * ex + 1];
      }
      __syncthreads();  // the tables are in (their readers of the last
                        // iteration passed the barrier above)
    }
    // In registers (kTileMinBlocks); the stores reload the output offsets.
    const TileAt at = tile_at[cur];
    uint64_t sr_base = 0;  // the A and C terms of the tile's elements
    uint64_t sr_col_base = 0;  // the same in their colwise indices
    if constexpr (kSr) {
      sr_base = SrMulti(p.sr, 0, p.k_axis, at.a) +
                SrMulti(p.sr, p.k_axis + 1, p.sr.n - 1, at.c);
      if (p.colwise) {
        sr_col_base = SrMulti<true>(p.sr, 0, p.k_axis, at.a) +
                      SrMulti<true>(p.sr, p.k_axis + 1, p.sr.n - 1, at.c);
      }
    }
    const uint8_t* buf = tile[cur];

    // Colwise: thread (kb, j) has rows 16 kb .. 16 kb + 15 of column j.
    if (p.colwise || p.use_2d) {
      const int kb = t / kTile;
      const int j = t % kTile;
      float v[kB];
#pragma unroll
      for (int i = 0; i < kB; ++i) {
        v[i] = In::Convert(*reinterpret_cast<const Storage*>(
            buf + (kb * kB + i) * kStride + j * kSize));
      }
      uint32_t tile_amax = 0;
      if (p.use_2d) {  // all lanes: the 16x16 tile's amax
        tile_amax = NanFreeKey<kB>(v);
#pragma unroll
        for (int s = 1; s < kB; s *= 2) {
          tile_amax =
              max(tile_amax, __shfl_xor_sync(0xFFFFFFFFu, tile_amax, s));
        }
        if (p.rowwise && j % kB == 0) tile_key[kb][j / kB] = tile_amax;
      }
      // (kb is the same in a warp: its lanes are 32 columns of one block.)
      if (p.colwise && kb * kB < at.rows) {
        const bool live = j < at.cols;
        if constexpr (kRht) {  // K % 16 == 0: the group is whole
          float rotated[kB];
          Rht16Exact<In::kVec == 8>(v, p.rht_factor, rotated);  // 16-bit In
#pragma unroll
          for (int i = 0; i < kB; ++i) v[i] = rotated[i];
        }
        const uint32_t raw = RawKey<kB>(v);
        const bool has_nan = raw > kF32Inf;
        const uint32_t key =
            p.use_2d ? tile_amax : (has_nan ? NanFreeKey<kB>(v) : raw);
        const uint32_t sdb = E4M3Byte(MulRn(__uint_as_float(key), col_factor));
        const float enc = enc_table[1][sdb & 127u];
        uint32_t q[4];
        if constexpr (kSr) {
          // Column j's terms, then the K coordinates of the block (stride 1
          // in the T layout).
          EncodeSrRun<kB>(
              v, enc, key0, key1, kColwiseStream,
              sr_col_base + SrTerm<true>(p.sr, p.sr.n - 1, at.l0 + j),
              static_cast<uint32_t>(
                  SrTerm<true>(p.sr, p.k_axis, at.k0 + kb * kB)),
              has_nan, q);
        } else if (has_nan) {
          EncodeExact<kB>(v, enc, q);
        } else {
          EncodeFast<kB>(v, enc, q);
        }
        if (live) {
          *reinterpret_cast<uint2*>(
              &stage.codes[1][j][8 * StagedChunk(j, kb)]) =
              make_uint2(PackNibbles8(q[0], q[1]), PackNibbles8(q[2], q[3]));
          reinterpret_cast<uint8_t*>(&stage.scales[1][j])[kb] =
              static_cast<uint8_t>(sdb);
        }
      }
    }

    // Rowwise: thread (r, lb) has columns 16 lb .. 16 lb + 15 of row r.
    if (p.rowwise) {
      if (p.use_2d) __syncthreads();  // tile_key is in
      const int r = t % kTile;
      const int lb = t / kTile;
      if (r < at.rows && lb * kB < at.cols) {
        uint32_t w[4 * kSize];
#pragma unroll
        for (int h = 0; h < kSize; ++h) {
          const uint4 four = *reinterpret_cast<const uint4*>(
              buf + r * kStride + lb * kB * kSize + 16 * h);
          w[4 * h] = four.x;
          w[4 * h + 1] = four.y;
          w[4 * h + 2] = four.z;
          w[4 * h + 3] = four.w;
        }
        float v[kB];
        Unpack<In, kB>(w, v);
        const uint32_t raw = RawKey<kB>(v);
        const bool has_nan = raw > kF32Inf;
        const uint32_t key = p.use_2d ? tile_key[r / kB][lb]
                                      : (has_nan ? NanFreeKey<kB>(v) : raw);
        const uint32_t sdb = E4M3Byte(MulRn(__uint_as_float(key), row_factor));
        const float enc = enc_table[0][sdb & 127u];
        uint32_t q[4];
        if constexpr (kSr) {
          const int64_t l_first = at.l0 + lb * kB;
          const uint64_t base = sr_base + SrTerm(p.sr, p.k_axis, at.k0 + r);
          const uint32_t last =
              static_cast<uint32_t>(SrTerm(p.sr, p.sr.n - 1, l_first));
          EncodeSrRun<kB>(v, enc, key0, key1, kRowwiseStream, base, last,
                          has_nan, q);
        } else if (has_nan) {
          EncodeExact<kB>(v, enc, q);
        } else {
          EncodeFast<kB>(v, enc, q);
        }
        *reinterpret_cast<uint2*>(&stage.codes[0][r][8 * StagedChunk(r, lb)]) =
            make_uint2(PackNibbles8(q[0], q[1]), PackNibbles8(q[2], q[3]));
        reinterpret_cast<uint8_t*>(&stage.scales[0][r])[lb] =
            static_cast<uint8_t>(sdb);
      }
    }

    // The staged outputs to global memory: threads 0..127 the rowwise lines
    // (tile rows), 128..255 the colwise ones (T-layout rows), two threads
    // per line's 32 code bytes (a warp: 16 lines, each line's bytes in one
    // instruction), and the first 64 threads of each half a line's 4 scale
    // bytes.
    // `stage` is next written after the next iteration's top barrier, which
    // every thread passes only after its stores here.
    __syncthreads();  // the tile's outputs are staged
    const int part = t / 128;  // the same in a warp
    if (part == 0 ? p.rowwise : p.colwise) {
      // The offsets from shared memory, not kept in registers through the
      // encode phases (tile_at[cur] is next written by the fetch two
      // iterations on).
      const TileAt& place = tile_at[cur];
      const int line = t % 128 / 2;
      const int h = t % 2;
      const int lines = part == 0 ? at.rows : at.cols;
      const int length = part == 0 ? at.cols : at.rows;  // codes per line
      if (line < lines && 2 * kB * h < length) {
        const int64_t index = part == 0 ? place.x_off + line * p.cl
                                        : place.col_off + line * p.ak;
        StoreStagedRun(part == 0 ? p.row : p.col, index + 2 * kB * h,
                       StagedHalf(stage.codes[part], line, h),
                       min(2 * kB, length - 2 * kB * h));
      }
      const int scale_line = t % 128;
      if (scale_line < lines) {
        uint8_t* dst =
            part == 0 ? p.row_scale + place.rs_off + scale_line * p.clb
                      : p.col_scale + place.cs_off + scale_line * p.akb;
        const uint32_t word = stage.scales[part][scale_line];
        const int blocks = (length + kB - 1) / kB;
        if (blocks == kTile / kB && reinterpret_cast<uintptr_t>(dst) % 4 == 0) {
          *reinterpret_cast<uint32_t*>(dst) = word;
        } else {
#pragma unroll
          for (int b = 0; b < kTile / kB; ++b) {
            if (b < blocks) dst[b] = static_cast<uint8_t>(word >> (8 * b));
          }
        }
      }
    }
    // No barrier ends the iteration: buffer `cur`, tile_at[cur] and tile_key
    // are next written after the next iteration's barrier (kBuffers), and so
    // is `stage`.
  }
}

// ---------------------------------------------------------------------------
// Host side.

template <typename In, bool kRht, bool kSr>
Nvfp4LaunchStatus LaunchTyped(const Nvfp4QuantizeProblem& pr,
                              const Nvfp4QuantizeBuffers& buf,
                              const SrLayout& sr, cudaStream_t stream) {
  const Nvfp4View& v = pr.view;
  TileParams p{};
  p.x = buf.x;
  p.amax = buf.amax;
  p.col_amax = buf.col_amax;
  p.key = buf.key;
  p.row = buf.row;
  p.row_scale = buf.row_scale;
  p.col = buf.col;
  p.col_scale = buf.col_scale;
  p.a = v.a;
  p.k = v.k;
  p.c = v.c;
  p.l = v.l;
  p.l_blocks = CeilDiv(v.l, int64_t{kB});
  p.k_blocks = CeilDiv(v.k, int64_t{kB});
  p.cl = v.c * v.l;
  p.clb = v.c * p.l_blocks;
  p.ak = v.a * v.k;
  p.akb = v.a * p.k_blocks;
  p.l_tiles = static_cast<uint64_t>(CeilDiv(v.l, int64_t{kTile}));
  p.k_tiles = static_cast<uint64_t>(CeilDiv(v.k, int64_t{kTile}));
  p.total_tiles = static_cast<uint64_t>(v.batch) * static_cast<uint64_t>(v.a) *
                  p.k_tiles * static_cast<uint64_t>(v.c) * p.l_tiles;
  p.narrow = p.total_tiles <= 0xFFFFFFFFull;
  p.rowwise = pr.rowwise;
  p.colwise = pr.colwise;
  p.use_2d = pr.use_2d;
  p.vec_load = v.l % In::kVec == 0 && IsAligned(buf.x, 16);
  p.k_axis = static_cast<int>(v.k_axis);
  const RhtMatrix m = MakeRhtMatrix(pr.rht_sign_mask);
  for (int i = 0; i < kRhtSize; ++i) p.rht_factor[i] = m.col[0][i];
  p.sr = sr;
  static const int per_sm = ResidentBlocks(TileKernel<In, kRht, kSr>, kThreads,
                                           kTileMinBlocks<kSr>);
  const uint64_t room = static_cast<uint64_t>(SmCount()) * per_sm;
  return LaunchPdl(
      TileKernel<In, kRht, kSr>,
      dim3(GridSize(static_cast<int64_t>(std::min(p.total_tiles, room)))),
      stream, p, "launching TileKernel");
}

}  // namespace

Nvfp4LaunchStatus LaunchTiles(const Nvfp4QuantizeProblem& problem,
                              const Nvfp4QuantizeBuffers& buffers,
                              const SrLayout& sr, cudaStream_t stream) {
  return DispatchInputAndModes(problem, [&](auto input, auto rht, auto sr_on) {
    return LaunchTyped<decltype(input), decltype(rht)::value,
                       decltype(sr_on)::value>(problem, buffers, sr, stream);
  });
}

}  // namespace eqx_quant::cuda::nvfp4
