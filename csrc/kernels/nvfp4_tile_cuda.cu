// CUDA kernel of eqx_quant_nvfp4_quantize for sm_90a: every problem with a
// colwise part or 2D scaling that PanelKernel (kernels/nvfp4_panel_cuda.cu,
// the aligned 1D colwise problems) does not take; kernels/nvfp4_quantize_cuda.cu
// has the rowwise-only kernels and the semantics. Bit-exact with the CPU
// kernel.
//
// TileKernel (256 threads, persistent CTAs, nothing allocated): a tile is 64
// k-rows (one a) x 64 l (one c) of an example, so rowwise blocks, colwise
// blocks and 2D tiles never straddle tiles; rows beyond K and columns beyond
// L are zero in shared memory (zero padding changes no block amax) and are
// not written. The next tile is fetched while the current one is processed
// (three buffers, one barrier per tile): cp.async of 16-byte row vectors when
// L is a multiple of a vector and x is 16-byte aligned, else scalar loads
// stored to shared memory.
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
//     butterfly in registers (use_rht), the block scale, the codes, one
//     8-byte streaming store of the 16 packed codes of 16 consecutive k of
//     the T layout (c, l, a, k) and one scale byte. SR: the 16 elements have
//     consecutive colwise indices (K is the last dim of the T layout): two
//     Threefry calls (EncodeSrRun).
//   * Rowwise phase: thread (r, lb) = (t % 64, t / 64) encodes columns
//     16 lb .. 16 lb + 15 of row r (two or four 16-byte shared loads) and
//     stores 16 packed codes (8 bytes) and a scale byte.
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
#include "kernels/nvfp4_quantize_cuda.h"
#include "kernels/nvfp4_quantize_cuda_device.cuh"

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

// Resident CTAs per SM: 3 without SR (up to 85 registers, so the tile's
// place stays in registers; with 4 CTAs and 64 registers each use waited for
// a shared-memory load: 1.4% slower at 8192^2), 2 with SR.
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
    const TileAt at = tile_at[cur];  // in registers (kTileMinBlocks)
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
          StorePackedCodes(p.col, at.col_off + j * p.ak + kb * kB, q,
                           min(kB, at.rows - kb * kB));
          p.col_scale[at.cs_off + j * p.akb + kb] = static_cast<uint8_t>(sdb);
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
        StorePackedCodes(p.row, at.x_off + r * p.cl + lb * kB, q,
                         min(kB, at.cols - lb * kB));
        p.row_scale[at.rs_off + r * p.clb + lb] = static_cast<uint8_t>(sdb);
      }
    }
    // No barrier: buffer `cur`, tile_at[cur] and tile_key are next written
    // after the next iteration's barrier (kBuffers).
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
