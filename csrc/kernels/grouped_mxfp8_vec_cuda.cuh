// The fast path of eqx_quant_grouped_mxfp8_quantize (sm_90a), included by
// kernels/grouped_quantize_cuda.cu only. Same bytes as the generic TileKernel
// there (and so as the CPU kernel); taken when N % kVec == 0 and x is 16-byte
// aligned (kVec = elements per 16 bytes: 8 for bf16 / f16, 4 for f32) and the
// data outputs are 8-byte aligned.
//
// VecKernel<kRow, kCol> is the dense MXFP8 TileKernel (kernels/
// mxfp8_quantize_cuda.cu) made grouped: persistent CTAs of 256 threads walk
// the work items in a grid-stride loop, each item a tile of 32 rows aligned
// at its group's start x 32 * kVec columns (16 KiB of input). Warp w owns
// tile rows w, w+8, w+16, w+24, one 16-byte vector per lane and row. The
// next item's vectors are fetched with cp.async into the other half of a
// double buffer while the current one is processed (each thread reads only
// the slots it fetched itself, so rowwise needs no barrier at all).
//   rowwise: a block is 32 / kVec consecutive lanes (shuffle max); 4
//     consecutive scale bytes of a row are contiguous in the swizzled region,
//     so they are gathered by shuffles and written as one word.
//   colwise: column maxima through shared memory as in the dense kernel,
//     scale bytes to T_g[n, tile] in the group's colwise region.
//   data: as in the dense kernel, the FP8 bytes of a warp's 4 rows are staged
//     in the warp's consumed half of the input buffer and written with
//     16-byte stores (a warp instruction writes 512 contiguous bytes of a
//     row) when N % 16 == 0 and the data outputs are 16-byte aligned ("wide");
//     else 8-byte (4 for f32) stores straight from registers.
// Scale offsets inside a region use 32-bit arithmetic (SwizzleOffset32): the
// launcher takes this path only for scale buffers below 2^32 bytes.
// Work items: per example, a warp-level pass over the group sizes gives the
// group tiles' count T and start_G; items [0, T * col_tiles) are the group
// tiles, the next ceil((R - start_G) / 32) * col_tiles the tail tiles that
// zero the rows of no group. A CTA's items have nondecreasing units, so a
// forward-only GroupCursor (the same in every thread) finds an item's group:
// a compare per item, a few scalar steps per group boundary crossed.

#ifndef EQX_QUANT_CSRC_KERNELS_GROUPED_MXFP8_VEC_CUDA_CUH_
#define EQX_QUANT_CSRC_KERNELS_GROUPED_MXFP8_VEC_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/e8m0.h"
#include "common/grouped_layout.h"
#include "kernels/grouped_quantize_cuda_device.cuh"
#include "kernels/mxfp8_quantize_cuda_device.cuh"

namespace eqx_quant::cuda::grouped_vec {

using grouped_dev::ClampedRows;
using grouped_dev::kThreads;
using grouped_dev::kWarps;
using grouped_dev::RowSpec;
using grouped_dev::WarpInclusive;

constexpr int kBlock = 32;
constexpr int kRowsPerThread = kBlock / kWarps;  // 4

struct VecParams {
  const void* x;
  const int32_t* group_sizes;
  uint8_t* row;
  uint8_t* row_scale;
  uint8_t* col;
  uint8_t* col_scale;
  int64_t batch;
  RowSpec rs;
  int64_t cols;  // N
  int64_t groups;
  int64_t row_scale_bytes;
  int64_t col_scale_bytes;
  uint32_t col_tiles;  // ceil(N / (32 * kVec))
  bool wide;  // N % 16 == 0 and 16-byte aligned data outputs: staged stores
};

// Where an item lies (the same in every lane of every warp).
struct VecTile {
  int64_t row0;        // first row of the tile in the example
  int64_t local0;      // its first row in the group (tile * 32)
  int64_t col0;        // first column
  int64_t row_region;  // O_g, rowwise
  int64_t col_region;  // O_g, colwise
  uint32_t col_q;      // Q_g of the colwise region (< 2^31 + 4)
  int rows;            // rows of the tile (<= 32), 0: nothing to do
  bool tail;           // zero the rows, no scales
};

// The group tiles of an example, T (*total_tiles), and start_G (*end): a
// warp-level pass over the group sizes, 32 at a time (every warp computes
// the same).
__device__ __forceinline__ void WarpTotals(const int32_t* sizes, int64_t G,
                                           const RowSpec& rs,
                                           int64_t* total_tiles,
                                           int64_t* end) {
  const int lane = threadIdx.x % 32;
  const int64_t R = rs.rows;
  int64_t carry_rows = 0;
  int64_t carry_tiles = 0;
  for (int64_t base = 0; base < G; base += 32) {
    const int64_t g = base + lane;
    const int64_t term = g < G ? ClampedRows(__ldg(sizes + g), rs) : 0;
    const int64_t incl = WarpInclusive(term);
    const int64_t start = min(R, carry_rows + incl - term);
    const int64_t count = min(R, carry_rows + incl) - start;
    carry_rows = min(R, carry_rows + __shfl_sync(0xFFFFFFFFu, incl, 31));
    const int64_t tincl = WarpInclusive((count + kBlock - 1) / kBlock);
    carry_tiles += __shfl_sync(0xFFFFFFFFu, tincl, 31);
  }
  *total_tiles = carry_tiles;
  *end = carry_rows;
}

// The group of the tiles a CTA meets next. A CTA's items have
// nondecreasing units (item = unit * col_tiles + column tile, items in a
// grid-stride loop), so the group of an item is found by moving forward from
// the last one, group by group, carrying the prefix sums (rows, tiles, scale
// region bytes) in int64: a compare per item, a few scalar steps per group
// crossed, the next group's size loaded one step ahead. Every thread keeps
// the same cursor (no shuffles, no barrier).
struct GroupCursor {
  int32_t g = -1;          // the group, -1 before the first (G < 2^31)
  int64_t start = 0;       // its first row
  int64_t count = 0;       // its rows
  int64_t first = 0;       // its first tile (unit)
  int64_t row_region = 0;  // O_g, rowwise
  int64_t col_region = 0;  // O_g, colwise
  int32_t next_size = 0;   // group_sizes[g + 1] (0 past the last)
};

template <bool kRow, bool kCol>
__device__ __forceinline__ void CursorAdvance(GroupCursor& c,
                                              const int32_t* sizes, int64_t G,
                                              const RowSpec& rs, int64_t N) {
  using grouped::GroupScaleRegion;
  using grouped::ScalePart;
  if constexpr (kRow) {
    c.row_region +=
        GroupScaleRegion(ScalePart::kRowwise, c.count, N, kBlock).bytes();
  }
  if constexpr (kCol) {
    c.col_region +=
        GroupScaleRegion(ScalePart::kColwise, c.count, N, kBlock).bytes();
  }
  const int64_t end = c.start + c.count;  // <= R
  c.first += (c.count + kBlock - 1) / kBlock;
  c.g += 1;
  c.start = end;
  c.count = min(rs.rows, end + ClampedRows(c.next_size, rs)) - end;
  c.next_size = c.g + 1 < G ? __ldg(sizes + c.g + 1) : 0;  // g + 1 < 2^31
}

template <bool kRow, bool kCol>
constexpr int kVecMinBlocks = kCol ? 4 : 6;

template <typename In, Fp8Format kFormat, bool kRow, bool kCol>
__global__ void __launch_bounds__(kThreads, (kVecMinBlocks<kRow, kCol>))
    VecKernel(const __grid_constant__ VecParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;
  constexpr int kTileCols = 32 * kVec;
  constexpr int kLanesPerBlock = kBlock / kVec;
  constexpr int kOutWords = kVec / 4;
  constexpr int kStageBytes = kRowsPerThread * kTileCols;  // per warp
  static_assert(kStageBytes <= kRowsPerThread * 32 * 16, "stage fits");
  static_assert(kStageBytes % 512 == 0, "whole warp stores");
  __shared__ __align__(16) uint32_t buf[2][kWarps][kRowsPerThread][32][4];
  __shared__ __align__(16) uint32_t part[kCol ? kWarps : 1][32 * 4];
  __shared__ __align__(16) float factors[kCol ? kTileCols : 4];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t N = p.cols;
  const int64_t R = p.rs.rows;
  const uint32_t row_q =
      static_cast<uint32_t>(grouped::PadTo((N + kBlock - 1) / kBlock, 4));
  const int64_t row_blocks = (N + kBlock - 1) / kBlock;

  for (int64_t ex = 0; ex < p.batch; ++ex) {
    const int32_t* sizes = p.group_sizes + ex * p.groups;
    const Storage* x = static_cast<const Storage*>(p.x) + ex * R * N;
    uint8_t* const row_out = kRow ? p.row + ex * R * N : nullptr;
    uint8_t* const col_out = kCol ? p.col + ex * R * N : nullptr;
    int64_t group_tiles = 0;
    int64_t end = 0;
    WarpTotals(sizes, p.groups, p.rs, &group_tiles, &end);
    // < 2^31 (checked on the host): 32-bit divisions, no calls.
    const uint32_t units =
        static_cast<uint32_t>(group_tiles + (R - end + kBlock - 1) / kBlock);
    const uint32_t items = units * p.col_tiles;

    GroupCursor cursor;
    cursor.next_size = p.groups > 0 ? __ldg(sizes) : 0;
    auto locate = [&](uint32_t item) {
      const uint32_t unit = item / p.col_tiles;
      VecTile t;
      t.col0 = int64_t{item - unit * p.col_tiles} * kTileCols;
      if (unit < group_tiles) {
        while (unit >= cursor.first + (cursor.count + kBlock - 1) / kBlock) {
          CursorAdvance<kRow, kCol>(cursor, sizes, p.groups, p.rs, N);
        }
        t.local0 = (unit - cursor.first) * kBlock;
        t.row0 = cursor.start + t.local0;
        t.rows = static_cast<int>(min(int64_t{kBlock}, cursor.count - t.local0));
        t.row_region = cursor.row_region;
        t.col_region = cursor.col_region;
        t.col_q = static_cast<uint32_t>(
            grouped::PadTo((cursor.count + kBlock - 1) / kBlock, 4));
        t.tail = false;
      } else {
        t.row0 = end + (unit - group_tiles) * kBlock;
        t.local0 = 0;
        t.rows = static_cast<int>(min(int64_t{kBlock}, R - t.row0));
        t.row_region = t.col_region = t.col_q = 0;
        t.tail = true;
      }
      return t;
    };
    auto fetch = [&](const VecTile& t, int b) {
      const int64_t col = t.col0 + lane * kVec;
#pragma unroll
      for (int u = 0; u < kRowsPerThread; ++u) {
        const int r = warp + kWarps * u;
        const bool valid = !t.tail && r < t.rows && col < N;
        AsyncCopy16(buf[b][warp][u][lane],
                           valid ? x + (t.row0 + r) * N + col : x, valid);
      }
    };

    int cur = 0;
    const uint32_t first_item = blockIdx.x;
    VecTile next{};
    if (first_item < items) {
      next = locate(first_item);
      fetch(next, 0);
    }
    AsyncCommit();
    for (uint32_t item = first_item; item < items;
         item += gridDim.x, cur ^= 1) {
      const VecTile t = next;
      if (item + gridDim.x < items) {
        next = locate(item + gridDim.x);
        fetch(next, cur ^ 1);
      }
      AsyncCommit();
      AsyncWaitGroup<1>();  // this thread's slots of `t` are in

      const int64_t my_col = t.col0 + lane * kVec;
      const bool col_ok = my_col < N;
      if (t.tail) {  // CTA-uniform: zero the rows of no group
#pragma unroll
        for (int u = 0; u < kRowsPerThread; ++u) {
          const int r = warp + kWarps * u;
          if (r < t.rows && col_ok) {
            const int64_t at = (t.row0 + r) * N + my_col;
            if constexpr (kOutWords == 2) {
              if (kRow) *reinterpret_cast<uint2*>(row_out + at) = uint2{0, 0};
              if (kCol) *reinterpret_cast<uint2*>(col_out + at) = uint2{0, 0};
            } else {
              if (kRow) *reinterpret_cast<uint32_t*>(row_out + at) = 0;
              if (kCol) *reinterpret_cast<uint32_t*>(col_out + at) = 0;
            }
          }
        }
        continue;
      }

      uint32_t w[kRowsPerThread][4];
#pragma unroll
      for (int u = 0; u < kRowsPerThread; ++u) {
        const uint4 v =
            *reinterpret_cast<const uint4*>(buf[cur][warp][u][lane]);
        w[u][0] = v.x;
        w[u][1] = v.y;
        w[u][2] = v.z;
        w[u][3] = v.w;
      }

      __syncwarp();  // the warp's slots are read: they become its stage
      uint8_t* const stage = reinterpret_cast<uint8_t*>(buf[cur][warp]);
      // One row of FP8 bytes: staged (wide), or stored from registers.
      auto store = [&](uint8_t* out, int u, const uint32_t (&q)[kOutWords]) {
        if (p.wide) {
          uint8_t* slot = stage + u * kTileCols + lane * kVec;
          StageCastWords(slot, q);
          return;
        }
        const int r = warp + kWarps * u;
        if (r < t.rows && col_ok) {
          uint8_t* dst = out + (t.row0 + r) * N + my_col;
          StoreCastWords(dst, q);
        }
      };
      // The staged rows -> 16-byte stores (a warp instruction writes 512
      // contiguous bytes of a row, or 4 rows of 128 bytes for f32).
      auto flush = [&](uint8_t* out) {
        if (!p.wide) return;
        __syncwarp();
#pragma unroll
        for (int chunk = 0; chunk < kStageBytes / 512; ++chunk) {
          const int byte = chunk * 512 + lane * 16;
          const int r = warp + kWarps * (byte / kTileCols);
          const int64_t col = t.col0 + byte % kTileCols;
          if (r < t.rows && col < N) {
            StoreStreaming16(out + (t.row0 + r) * N + col,
                             *reinterpret_cast<const uint4*>(stage + byte));
          }
        }
        __syncwarp();
      };

      if constexpr (kCol) {
        uint32_t ck[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          ck[j] = mxfp8::KeyWordMax<In, kRowsPerThread>(&w[0][j], 4);
        }
        *reinterpret_cast<uint4*>(&part[warp][lane * 4]) =
            make_uint4(ck[0], ck[1], ck[2], ck[3]);
      }

      if constexpr (kRow) {
        uint8_t* const scales = p.row_scale + ex * p.row_scale_bytes +
                                t.row_region;
        const int64_t block0 = t.col0 / kBlock;  // a multiple of 4
#pragma unroll
        for (int u = 0; u < kRowsPerThread; ++u) {
          uint32_t key = mxfp8::VectorKey<In>(w[u]);
#pragma unroll
          for (int s = 1; s < kLanesPerBlock; s *= 2) {
            key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, s));
          }
          const uint8_t e = mxfp8::BlockScale<kFormat>(In::KeyToFloat(key));
          const float factor = E8m0ReciprocalScale(e);
          uint32_t q[kOutWords];
          mxfp8::QuantizeVector<In, kFormat, true>(w[u], &factor, q);
          store(row_out, u, q);
          // Scale bytes of blocks block0 + lane / kLanesPerBlock: four
          // consecutive blocks (one word of the swizzled row) per
          // 4 * kLanesPerBlock lanes; blocks past N are padding (0).
          const int64_t blk = block0 + lane / kLanesPerBlock;
          uint32_t byte = blk < row_blocks ? e : 0u;
          uint32_t word = byte;
#pragma unroll
          for (int k = 1; k < 4; ++k) {
            const uint32_t other =
                __shfl_down_sync(0xFFFFFFFFu, byte, k * kLanesPerBlock);
            word |= other << (8 * k);
          }
          const int r = warp + kWarps * u;
          if (lane % (4 * kLanesPerBlock) == 0 && r < t.rows &&
              blk < row_blocks) {
            const int64_t i = t.local0 + r;
            *reinterpret_cast<uint32_t*>(
                scales + grouped::SwizzleOffset32(static_cast<uint32_t>(i),
                                                  static_cast<uint32_t>(blk),
                                                  row_q)) = word;
          }
        }
        flush(row_out);
      }

      if constexpr (kCol) {
        __syncthreads();  // the partials are in
        const int c = threadIdx.x;  // key word c
        if (c < 32 * 4) {
          uint32_t m = part[0][c];
#pragma unroll
          for (int v = 1; v < kWarps; ++v) m = mxfp8::KeyMax<In>(m, part[v][c]);
          uint8_t* scales = p.col_scale + ex * p.col_scale_bytes + t.col_region;
          const int64_t b = t.local0 / kBlock;
#pragma unroll
          for (int h = 0; h < In::kKeysPerWord; ++h) {
            const uint32_t key =
                In::kKeysPerWord == 2 ? (h ? m >> 16 : m & 0xFFFFu) : m;
            const uint8_t e = mxfp8::BlockScale<kFormat>(In::KeyToFloat(key));
            const int column = c * In::kKeysPerWord + h;
            factors[column] = E8m0ReciprocalScale(e);
            const int64_t n = t.col0 + column;
            if (n < N) {
              scales[grouped::SwizzleOffset32(static_cast<uint32_t>(n),
                                              static_cast<uint32_t>(b),
                                              t.col_q)] = e;
            }
          }
        }
        __syncthreads();  // the factors are in
        float f[kVec];
#pragma unroll
        for (int e = 0; e < kVec; e += 4) {
          const float4 four =
              *reinterpret_cast<const float4*>(&factors[lane * kVec + e]);
          f[e] = four.x;
          f[e + 1] = four.y;
          f[e + 2] = four.z;
          f[e + 3] = four.w;
        }
#pragma unroll
        for (int u = 0; u < kRowsPerThread; ++u) {
          uint32_t q[kOutWords];
          mxfp8::QuantizeVector<In, kFormat, false>(w[u], f, q);
          store(col_out, u, q);
        }
        flush(col_out);
      }
    }  // items
    // Drain before the next example reuses the buffers.
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
  }  // examples
}

}  // namespace eqx_quant::cuda::grouped_vec

#endif  // EQX_QUANT_CSRC_KERNELS_GROUPED_MXFP8_VEC_CUDA_CUH_
