// CUDA kernels of eqx_quant_nvfp4_quantize for sm_90a (H100 / H200).
//
// Semantics: exactly the CPU kernel's (kernels/nvfp4_quantize_cpu.h), bit for
// bit (docs/block_formats.md, "NVFP4"). Per block of 16 (a partial block as
// if zero-padded): block amax = NaN-ignoring max |x| (the 16x16 tile's in
// 2D); sdb = e4m3(fl(amax * factor)); enc = Nvfp4EncodeMultiplier(sdb);
// code = e2m1(fl(x * enc)) (RN, or SR with the element's counter-based
// threefry word). The per-tensor and per-block scale math is that of
// common/nvfp4_format.h (shared with the CPU kernel); the element encoder and
// the RHT are the exact reformulations of kernels/nvfp4_quantize_cuda_device
// .cuh. Compiled with --fmad=false --ftz=false --prec-div=true, so `*` and
// `/` in the shared headers are IEEE operations, as on the host.
//
// Kernels (256 threads, nothing allocated):
//   * RowFastKernel: rowwise only (no colwise part, no 2D), L % 16 == 0 and
//     16-byte aligned buffers. Each example is a flat run of 16-element
//     blocks; a thread owns one 16-byte vector (8 bf16 / f16, 4 f32), so a
//     block is 2 (or 4) adjacent lanes, its amax a shuffle. 4 vectors per
//     thread in flight, codes stored as 8 (4) contiguous bytes per lane, the
//     encode multipliers of the 128 possible scale bytes in a shared table.
//   * RowScalarKernel: rowwise only, every other shape: one thread per block,
//     scalar loads.
//   * TileKernel: everything with a colwise part or 2D scaling. A tile is 64
//     k-rows (one a) x 64 l (one c) of an example, staged in shared memory
//     (cp.async double buffering when rows are 16-byte vectors, else scalar
//     loads), persistent CTAs. Colwise: thread (kb, l) reads its 16-row
//     column block (RHT in registers), writes 16 contiguous codes of the T
//     layout (c, l, a, k) and one scale. 2D: the 16x16 tile amax is a
//     16-lane shuffle of the column maxima, shared with the rowwise threads
//     through shared memory. Rowwise: thread (r, lb) encodes one row block
//     from shared memory (row stride 16 mod 128 bytes: conflict-free).
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

namespace eqx_quant::cuda {
namespace {

using namespace nvfp4;  // NOLINT: the device helpers of this op

constexpr int kThreads = 256;
constexpr int kTile = 64;  // tile rows (k) and columns (l)
constexpr int kRowUnroll = 4;  // RowFastKernel: vectors in flight per thread

// ---------------------------------------------------------------------------
// Rowwise kernels.

struct RowParams {
  const void* x;
  const float* amax;
  const uint32_t* key;
  uint8_t* row;
  uint8_t* row_scale;
  int64_t batch;
  int64_t elements;  // per example: rows * L
  int64_t l;
  int64_t l_blocks;  // ceil(L / 16)
  int64_t blocks;    // per example: rows * l_blocks
  bool narrow;       // elements < 2^32: 32-bit divisions
  SrLayout sr;       // the SR index: rows over S[:n-1], L = S[n-1]
};

// Resident CTAs per SM the kernels are built for (registers <= 64; the
// stochastic-rounding variants are ALU-bound and get up to 128).
template <bool kSr>
constexpr int kRowMinBlocks = kSr ? 2 : 4;

template <typename In, bool kSr>
__global__ void __launch_bounds__(kThreads, kRowMinBlocks<kSr>)
    RowFastKernel(const __grid_constant__ RowParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;        // elements per thread vector
  constexpr int kGroup = kB / kVec;     // lanes per block: 2 or 4
  __shared__ float enc_table[128];
  const int lane = threadIdx.x % 32;
  const unsigned group_mask = ((1u << kGroup) - 1u)
                              << (lane & ~(kGroup - 1));
  const int64_t vectors = p.elements / kVec;

  for (int64_t ex = blockIdx.y; ex < p.batch; ex += gridDim.y) {
    const Nvfp4TensorScale ts = MakeNvfp4TensorScale(p.amax[ex]);
    __syncthreads();  // the previous example's readers are done
    if (threadIdx.x < 128) {
      enc_table[threadIdx.x] =
          Nvfp4EncodeMultiplier(static_cast<uint8_t>(threadIdx.x), ts);
    }
    __syncthreads();
    const uint32_t key0 = kSr ? p.key[2 * ex] : 0u;
    const uint32_t key1 = kSr ? p.key[2 * ex + 1] : 0u;
    const uint4* x = reinterpret_cast<const uint4*>(
        static_cast<const Storage*>(p.x) + ex * p.elements);
    uint8_t* out = p.row + ex * p.elements;
    uint8_t* scale = p.row_scale + ex * p.blocks;

    const int64_t step = int64_t{gridDim.x} * kThreads * kRowUnroll;
    for (int64_t base = int64_t{blockIdx.x} * kThreads * kRowUnroll;
         base < vectors; base += step) {
      uint4 raw[kRowUnroll];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int64_t j = base + threadIdx.x + u * kThreads;
        raw[u] = j < vectors ? __ldg(x + j) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int64_t j = base + threadIdx.x + u * kThreads;
        // Uniform over a block's lanes (vectors is a multiple of kGroup).
        if (j >= vectors) continue;
        const uint32_t w[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
        float v[kVec];
        Unpack<In, kVec>(w, v);
        uint32_t key = RawKey<kVec>(v);
#pragma unroll
        for (int s = 1; s < kGroup; s *= 2) {
          key = max(key, __shfl_xor_sync(group_mask, key, s));
        }
        const bool has_nan = key > kF32Inf;  // the same in the block's lanes
        if (has_nan) {
          key = NanFreeKey<kVec>(v);
#pragma unroll
          for (int s = 1; s < kGroup; s *= 2) {
            key = max(key, __shfl_xor_sync(group_mask, key, s));
          }
        }
        const uint32_t sdb = E4M3Byte(MulRn(__uint_as_float(key), ts.factor));
        const float enc = enc_table[sdb & 127u];
        uint32_t q[kVec / 4];
        if constexpr (kSr) {
          int64_t l0;
          const int64_t row = DivMod(j * kVec, p.l, p.narrow, l0);
          const uint64_t row_index = SrMulti(p.sr, 0, p.sr.n - 1, row);
          EncodeSr<kVec>(
              v, enc, key0, key1, kRowwiseStream,
              [&](int e) { return row_index + SrTerm(p.sr, p.sr.n - 1, l0 + e); },
              q);
        } else if (has_nan) {
          EncodeExact<kVec>(v, enc, q);
        } else {
          EncodeFast<kVec>(v, enc, q);
        }
        if constexpr (kVec == 8) {
          *reinterpret_cast<uint2*>(out + j * kVec) = make_uint2(q[0], q[1]);
        } else {
          *reinterpret_cast<uint32_t*>(out + j * kVec) = q[0];
        }
        if (lane % kGroup == 0) scale[j / kGroup] = static_cast<uint8_t>(sdb);
      }
    }
  }
}

template <typename In, bool kSr>
__global__ void __launch_bounds__(kThreads, kRowMinBlocks<kSr>)
    RowScalarKernel(const __grid_constant__ RowParams p) {
  using Storage = typename In::Storage;
  __shared__ float enc_table[128];
  for (int64_t ex = blockIdx.y; ex < p.batch; ex += gridDim.y) {
    const Nvfp4TensorScale ts = MakeNvfp4TensorScale(p.amax[ex]);
    __syncthreads();  // the previous example's readers are done
    if (threadIdx.x < 128) {
      enc_table[threadIdx.x] =
          Nvfp4EncodeMultiplier(static_cast<uint8_t>(threadIdx.x), ts);
    }
    __syncthreads();
    const uint32_t key0 = kSr ? p.key[2 * ex] : 0u;
    const uint32_t key1 = kSr ? p.key[2 * ex + 1] : 0u;
    const Storage* x = static_cast<const Storage*>(p.x) + ex * p.elements;
    uint8_t* out = p.row + ex * p.elements;
    uint8_t* scale = p.row_scale + ex * p.blocks;
    for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x;
         i < p.blocks; i += int64_t{gridDim.x} * kThreads) {
      int64_t lb;
      const int64_t row = DivMod(i, p.l_blocks, p.narrow, lb);
      const int64_t first = lb * kB;
      const int count = static_cast<int>(min(int64_t{kB}, p.l - first));
      const Storage* src = x + row * p.l + first;
      float v[kB];
#pragma unroll
      for (int e = 0; e < kB; ++e) {
        v[e] = e < count ? In::Convert(src[e]) : 0.0f;
      }
      const uint32_t raw = RawKey<kB>(v);
      const bool has_nan = raw > kF32Inf;
      const uint32_t key = has_nan ? NanFreeKey<kB>(v) : raw;
      const uint32_t sdb = E4M3Byte(MulRn(__uint_as_float(key), ts.factor));
      const float enc = enc_table[sdb & 127u];
      uint32_t q[4];
      if constexpr (kSr) {
        const uint64_t row_index = SrMulti(p.sr, 0, p.sr.n - 1, row);
        EncodeSr<kB>(
            v, enc, key0, key1, kRowwiseStream,
            [&](int e) { return row_index + SrTerm(p.sr, p.sr.n - 1, first + e); },
            q);
      } else if (has_nan) {
        EncodeExact<kB>(v, enc, q);
      } else {
        EncodeFast<kB>(v, enc, q);
      }
      StoreCodes(out + row * p.l + first, q, count);
      scale[i] = static_cast<uint8_t>(sdb);
    }
  }
}

// ---------------------------------------------------------------------------
// The tile kernel.

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

template <typename In, bool kRht, bool kSr>
__global__ void __launch_bounds__(kThreads, kRowMinBlocks<kSr>)
    TileKernel(const __grid_constant__ TileParams p) {
  using Storage = typename In::Storage;
  constexpr int kSize = sizeof(Storage);
  constexpr int kStride = kTile * kSize + 16;  // bytes per row: 16 mod 128
  constexpr int kVec = In::kVec;
  constexpr int kVecPerRow = kTile / kVec;
  constexpr int kVecPerThread = kTile * kVecPerRow / kThreads;
  constexpr int kElemPerThread = kTile * kTile / kThreads;
  __shared__ __align__(16) uint8_t tile[2][kTile * kStride];
  __shared__ TileAt tile_at[2];  // where the tile in each buffer lies
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
  for (; g < p.total_tiles; g += gridDim.x, cur ^= 1) {
    if (g + gridDim.x < p.total_tiles) fetch(g + gridDim.x, cur ^ 1);
    AsyncCommit();
    AsyncWaitAllButNewest();  // this thread's part of tile g is in
    __syncthreads();          // everyone's part is, and tile_at[cur]

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
      __syncthreads();  // the tables are in (their readers passed the last
                        // iteration's final barrier)
    }
    const TileAt& at = tile_at[cur];
    uint64_t sr_base = 0;  // the A and C terms of the tile's elements
    if constexpr (kSr) {
      sr_base = SrMulti(p.sr, 0, p.k_axis, at.a) +
                SrMulti(p.sr, p.k_axis + 1, p.sr.n - 1, at.c);
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
          tile_amax = max(tile_amax, __shfl_xor_sync(0xFFFFFFFFu, tile_amax, s));
        }
        if (p.rowwise && j % kB == 0) tile_key[kb][j / kB] = tile_amax;
      }
      if (p.colwise && kb * kB < at.rows && j < at.cols) {
        if constexpr (kRht) {  // K % 16 == 0: the group is whole
          float rotated[kB];
          Rht16Exact(v, p.rht_factor, rotated);
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
          const int64_t k_first = at.k0 + kb * kB;
          const uint64_t base = sr_base + SrTerm(p.sr, p.sr.n - 1, at.l0 + j);
          EncodeSr<kB>(
              v, enc, key0, key1, kColwiseStream,
              [&](int i) { return base + SrTerm(p.sr, p.k_axis, k_first + i); },
              q);
        } else if (has_nan) {
          EncodeExact<kB>(v, enc, q);
        } else {
          EncodeFast<kB>(v, enc, q);
        }
        StoreCodes(p.col + at.col_off + j * p.ak + kb * kB, q,
                   min(kB, at.rows - kb * kB));
        p.col_scale[at.cs_off + j * p.akb + kb] = static_cast<uint8_t>(sdb);
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
          EncodeSr<kB>(
              v, enc, key0, key1, kRowwiseStream,
              [&](int e) {
                return base + SrTerm(p.sr, p.sr.n - 1, l_first + e);
              },
              q);
        } else if (has_nan) {
          EncodeExact<kB>(v, enc, q);
        } else {
          EncodeFast<kB>(v, enc, q);
        }
        StoreCodes(p.row + at.x_off + r * p.cl + lb * kB, q,
                   min(kB, at.cols - lb * kB));
        p.row_scale[at.rs_off + r * p.clb + lb] = static_cast<uint8_t>(sdb);
      }
    }
    __syncthreads();  // buffer `cur`, tile_at[cur] and tile_key are free
  }
}

// ---------------------------------------------------------------------------
// Host side.

template <typename Kernel>
int ResidentBlocks(Kernel kernel, int fallback) {
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads,
                                                    0) != cudaSuccess ||
      blocks <= 0) {
    cudaGetLastError();
    blocks = fallback;
  }
  return blocks;
}

template <typename In, bool kSr>
Nvfp4LaunchStatus LaunchRows(const Nvfp4QuantizeProblem& pr,
                             const Nvfp4QuantizeBuffers& buf,
                             const SrLayout& sr, cudaStream_t stream) {
  const Nvfp4View& v = pr.view;
  RowParams p{};
  p.x = buf.x;
  p.amax = buf.amax;
  p.key = buf.key;
  p.row = buf.row;
  p.row_scale = buf.row_scale;
  p.batch = v.batch;
  p.elements = v.a * v.k * v.c * v.l;
  p.l = v.l;
  p.l_blocks = (v.l + kB - 1) / kB;
  p.blocks = (p.elements / v.l) * p.l_blocks;
  p.narrow = p.elements <= 0xFFFFFFFF;
  p.sr = sr;
  const unsigned grid_y = static_cast<unsigned>(std::min<int64_t>(v.batch, 65535));
  const bool fast = v.l % kB == 0 && IsAligned(buf.x, 16) &&
                    IsAligned(buf.row, 16);
  if (fast) {
    static const int per_sm = ResidentBlocks(RowFastKernel<In, kSr>, 4);
    const int64_t vectors = p.elements / In::kVec;
    const int64_t want = CeilDiv(vectors, int64_t{kThreads} * kRowUnroll);
    const int64_t room = std::max<int64_t>(1, SmCount() * per_sm / grid_y);
    RowFastKernel<In, kSr>
        <<<dim3(GridSize(std::min(want, room)), grid_y), kThreads, 0,
           stream>>>(p);
    return CheckLaunch("launching RowFastKernel");
  }
  static const int per_sm = ResidentBlocks(RowScalarKernel<In, kSr>, 4);
  const int64_t want = CeilDiv(p.blocks, int64_t{kThreads});
  const int64_t room = std::max<int64_t>(1, SmCount() * per_sm * 2 / grid_y);
  RowScalarKernel<In, kSr>
      <<<dim3(GridSize(std::min(want, room)), grid_y), kThreads, 0, stream>>>(
          p);
  return CheckLaunch("launching RowScalarKernel");
}

template <typename In, bool kRht, bool kSr>
Nvfp4LaunchStatus LaunchTiles(const Nvfp4QuantizeProblem& pr,
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
  static const int per_sm = ResidentBlocks(TileKernel<In, kRht, kSr>, 4);
  const uint64_t room = static_cast<uint64_t>(SmCount()) * per_sm;
  TileKernel<In, kRht, kSr>
      <<<GridSize(static_cast<int64_t>(std::min(p.total_tiles, room))),
         kThreads, 0, stream>>>(p);
  return CheckLaunch("launching TileKernel");
}

template <typename In, bool kSr>
Nvfp4LaunchStatus RunTyped(const Nvfp4QuantizeProblem& pr,
                           const Nvfp4QuantizeBuffers& buf, const SrLayout& sr,
                           cudaStream_t stream) {
  if (!pr.colwise && !pr.use_2d) return LaunchRows<In, kSr>(pr, buf, sr, stream);
  if (pr.use_rht) return LaunchTiles<In, true, kSr>(pr, buf, sr, stream);
  return LaunchTiles<In, false, kSr>(pr, buf, sr, stream);
}

template <bool kSr>
Nvfp4LaunchStatus DispatchInput(const Nvfp4QuantizeProblem& pr,
                                const Nvfp4QuantizeBuffers& buf,
                                const SrLayout& sr, cudaStream_t stream) {
  switch (pr.view.input_type) {
    case InputType::kF32: return RunTyped<F32In, kSr>(pr, buf, sr, stream);
    case InputType::kF16: return RunTyped<F16In, kSr>(pr, buf, sr, stream);
    case InputType::kBF16: return RunTyped<Bf16In, kSr>(pr, buf, sr, stream);
  }
  return Nvfp4LaunchStatus{false, 0, "unknown input type"};
}

}  // namespace

Nvfp4LaunchStatus Nvfp4Quantize(const Nvfp4QuantizeProblem& problem,
                                const Nvfp4QuantizeBuffers& buffers,
                                CUstream_st* stream) {
  const Nvfp4View& v = problem.view;
  if (v.batch * v.a * v.k * v.c * v.l == 0) return Nvfp4LaunchStatus{};
  SrLayout sr{};
  if (problem.stochastic_rounding) {
    const int n = static_cast<int>(v.shape.size());
    if (n > kMaxSrRank) {
      return Nvfp4LaunchStatus{
          false, 0, "stochastic rounding supports per-example ranks up to 32"};
    }
    sr.offset = buffers.offset;
    sr.n = n;
    sr.narrow = v.a * v.k * v.c * v.l <= 0xFFFFFFFF;
    uint64_t stride = 1;
    for (int d = n - 1; d >= 0; --d) {
      sr.shape[d] = v.shape[d];
      sr.stride[d] = stride;
      stride *= static_cast<uint64_t>(problem.global_shape[d]);
    }
    return DispatchInput<true>(problem, buffers, sr, stream);
  }
  sr.n = static_cast<int>(v.shape.size());
  return DispatchInput<false>(problem, buffers, sr, stream);
}

}  // namespace eqx_quant::cuda
