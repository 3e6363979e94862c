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
//   rowwise: a block is 32 / kVec consecutive lanes (shuffle max); the data
//     bytes are stored straight from registers (a warp writes 32 * kVec
//     contiguous bytes per row); 4 consecutive scale bytes of a row are
//     contiguous in the swizzled region, so they are gathered by shuffles and
//     written as one word.
//   colwise: column maxima through shared memory as in the dense kernel,
//     scale bytes to T_g[n, tile] in the group's colwise region.
// Work items: per example, a warp-level pass over the group sizes gives the
// group tiles' count T and start_G; items [0, T * col_tiles) are the group
// tiles, the next ceil((R - start_G) / 32) * col_tiles the tail tiles that
// zero the rows of no group. A warp finds an item's group with shuffle scans
// of 32 groups at a time (no block barrier); every warp of the CTA computes
// the same answer.

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
};

// Where an item lies (the same in every lane of every warp).
struct VecTile {
  int64_t row0;        // first row of the tile in the example
  int64_t local0;      // its first row in the group (tile * 32)
  int64_t col0;        // first column
  int64_t row_region;  // O_g, rowwise
  int64_t col_region;  // O_g, colwise
  int64_t col_q;       // Q_g of the colwise region
  int rows;            // rows of the tile (<= 32), 0: nothing to do
  bool tail;           // zero the rows, no scales
};

__device__ __forceinline__ int64_t WarpInclusive(int64_t v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int s = 1; s < 32; s *= 2) {
    const int64_t other = __shfl_up_sync(0xFFFFFFFFu, v, s);
    if (lane >= s) v += other;
  }
  return v;
}

// The group tile number `unit` of an example (counted group after group), or
// with *found = false: *total_tiles = T and *end = start_G.
template <bool kRow, bool kCol>
__device__ __forceinline__ bool WarpLocate(const int32_t* sizes, int64_t G,
                                           const RowSpec& rs, int64_t N,
                                           int64_t unit, VecTile* out,
                                           int64_t* total_tiles,
                                           int64_t* end) {
  using grouped::GroupScaleRegion;
  using grouped::ScalePart;
  const int lane = threadIdx.x % 32;
  const int64_t R = rs.rows;
  int64_t carry_rows = 0;
  int64_t carry_tiles = 0;
  int64_t carry_rb = 0;
  int64_t carry_cb = 0;
  for (int64_t base = 0; base < G; base += 32) {
    const int64_t g = base + lane;
    const int64_t term = g < G ? ClampedRows(__ldg(sizes + g), rs) : 0;
    const int64_t incl = WarpInclusive(term);
    const int64_t start = min(R, carry_rows + incl - term);
    const int64_t count = min(R, carry_rows + incl) - start;
    carry_rows = min(R, carry_rows + __shfl_sync(0xFFFFFFFFu, incl, 31));
    const int64_t tiles = (count + kBlock - 1) / kBlock;
    const int64_t tincl = WarpInclusive(tiles);
    const int64_t first = carry_tiles + tincl - tiles;
    carry_tiles += __shfl_sync(0xFFFFFFFFu, tincl, 31);
    int64_t rb = 0;
    int64_t cb = 0;
    if constexpr (kRow) {
      const int64_t bytes =
          GroupScaleRegion(ScalePart::kRowwise, count, N, kBlock).bytes();
      const int64_t incl_b = WarpInclusive(bytes);
      rb = carry_rb + incl_b - bytes;
      carry_rb += __shfl_sync(0xFFFFFFFFu, incl_b, 31);
    }
    if constexpr (kCol) {
      const int64_t bytes =
          GroupScaleRegion(ScalePart::kColwise, count, N, kBlock).bytes();
      const int64_t incl_b = WarpInclusive(bytes);
      cb = carry_cb + incl_b - bytes;
      carry_cb += __shfl_sync(0xFFFFFFFFu, incl_b, 31);
    }
    const bool hit = g < G && unit >= first && unit < first + tiles;
    const unsigned mask = __ballot_sync(0xFFFFFFFFu, hit);
    if (mask != 0) {
      const int src = __ffs(mask) - 1;
      const int64_t s = __shfl_sync(0xFFFFFFFFu, start, src);
      const int64_t c = __shfl_sync(0xFFFFFFFFu, count, src);
      const int64_t f = __shfl_sync(0xFFFFFFFFu, first, src);
      out->local0 = (unit - f) * kBlock;
      out->row0 = s + out->local0;
      out->rows = static_cast<int>(min(int64_t{kBlock}, c - out->local0));
      out->row_region = __shfl_sync(0xFFFFFFFFu, rb, src);
      out->col_region = __shfl_sync(0xFFFFFFFFu, cb, src);
      out->col_q = grouped::PadTo((c + kBlock - 1) / kBlock, 4);
      out->tail = false;
      return true;
    }
  }
  *total_tiles = carry_tiles;
  *end = carry_rows;
  return false;
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
  __shared__ __align__(16) uint32_t buf[2][kWarps][kRowsPerThread][32][4];
  __shared__ __align__(16) uint32_t part[kCol ? kWarps : 1][32 * 4];
  __shared__ __align__(16) float factors[kCol ? kTileCols : 4];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t N = p.cols;
  const int64_t R = p.rs.rows;
  const int64_t row_q = grouped::PadTo((N + kBlock - 1) / kBlock, 4);
  const int64_t row_blocks = (N + kBlock - 1) / kBlock;

  for (int64_t ex = 0; ex < p.batch; ++ex) {
    const int32_t* sizes = p.group_sizes + ex * p.groups;
    const Storage* x = static_cast<const Storage*>(p.x) + ex * R * N;
    uint8_t* const row_out = kRow ? p.row + ex * R * N : nullptr;
    uint8_t* const col_out = kCol ? p.col + ex * R * N : nullptr;
    int64_t group_tiles = 0;
    int64_t end = 0;
    {
      VecTile unused;
      WarpLocate<kRow, kCol>(sizes, p.groups, p.rs, N, int64_t{1} << 62,
                             &unused, &group_tiles, &end);
    }
    // < 2^31 (checked on the host): 32-bit divisions, no calls.
    const uint32_t units =
        static_cast<uint32_t>(group_tiles + (R - end + kBlock - 1) / kBlock);
    const uint32_t items = units * p.col_tiles;

    auto locate = [&](uint32_t item) {
      const uint32_t unit = item / p.col_tiles;
      VecTile t;
      t.col0 = int64_t{item - unit * p.col_tiles} * kTileCols;
      int64_t tt;
      int64_t e;
      if (!WarpLocate<kRow, kCol>(sizes, p.groups, p.rs, N, unit, &t, &tt,
                                  &e)) {
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
        mxfp8::AsyncCopy16(buf[b][warp][u][lane],
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
    mxfp8::AsyncCommit();
    for (uint32_t item = first_item; item < items;
         item += gridDim.x, cur ^= 1) {
      const VecTile t = next;
      if (item + gridDim.x < items) {
        next = locate(item + gridDim.x);
        fetch(next, cur ^ 1);
      }
      mxfp8::AsyncCommit();
      mxfp8::AsyncWaitAllButNewest();  // this thread's slots of `t` are in

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

      auto store = [&](uint8_t* out, int u, const uint32_t (&q)[kOutWords]) {
        const int r = warp + kWarps * u;
        if (r < t.rows && col_ok) {
          uint8_t* dst = out + (t.row0 + r) * N + my_col;
          if constexpr (kOutWords == 2) {
            *reinterpret_cast<uint2*>(dst) = make_uint2(q[0], q[1]);
          } else {
            *reinterpret_cast<uint32_t*>(dst) = q[0];
          }
        }
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
                scales + grouped::SwizzleOffset(i, blk, row_q)) = word;
          }
        }
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
            if (n < N) scales[grouped::SwizzleOffset(n, b, t.col_q)] = e;
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
      }
    }  // items
    // Drain before the next example reuses the buffers.
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
  }  // examples
}

}  // namespace eqx_quant::cuda::grouped_vec

#endif  // EQX_QUANT_CSRC_KERNELS_GROUPED_MXFP8_VEC_CUDA_CUH_
