// The walk kernel of eqx_quant_fp8_quantize (sm_90a): the transposed output
// and/or the fused dbias (and the rowwise output in the same pass). See the
// top of fp8/quantize_cuda.cu for the launch sequence and the float semantics.
//
// A block of 64 threads owns a tile of 64 x kVec columns (16 input bytes per
// thread) and walks a range of rows in increasing order, kChunkRows rows at a
// time, 8 rows of loads in flight per thread. Per row it writes the rowwise
// bytes straight to global memory and the same bytes into a shared-memory
// staging tile (XOR-swizzled against bank conflicts); after each chunk the
// tile is written out transposed, a 4x4 byte transpose in registers and
// 16-byte stores (whole kChunkRows-byte runs of 16 output rows per warp
// instruction). Without dbias the row ranges are 32-128 rows (96 registers,
// 10 blocks per SM). With dbias a range is one dbias node (or one of 2^s
// subtrees of it, when there are too few nodes x column tiles to fill the GPU:
// a cluster of 2^s blocks, rank 0 merging the subtree sums through
// distributed shared memory), and each thread adds its columns in exact
// canonical tree order with a DbiasStack (fp8/quantize_cuda.h: the
// top and 2 levels in registers, deeper levels in shared memory; the merges
// of each row come from a per-chunk table) (128 registers, 8 blocks per SM).
// With current scaling (scale_from_amax) the amax kernel has run first: every
// block derives the scale from the finished amax, block 0 of each example
// writes scale_inv, and nothing is published to amax again.

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "fp8/device_cuda.cuh"
#include "fp8/launch_cuda.h"
#include "fp8/quantize_cuda.h"

namespace eqx_quant::cuda::fp8 {
namespace {

namespace cg = cooperative_groups;
namespace walk = dbias_walk;

// WalkKernel.
constexpr int kWalkThreads = 64;
constexpr int kChunkRows = 32;        // rows staged per transposed write-out
constexpr int kRowBlocks = kChunkRows / 16;  // 16-row blocks in a chunk
constexpr int kWalkBlocksPerSm = 16;  // at most, for the grid size aimed at
constexpr int kMaxClusterLevels = 3;  // up to 8 blocks per dbias node
static_assert(kChunkRows % 16 == 0 && 32 % kRowBlocks == 0, "chunk shape");
static_assert(kChunkRows <= 64, "merges table is one byte per chunk row");

// ---------------------------------------------------------------------------
// 2b. The walk: transposed output and/or dbias (and the rowwise output).

struct WalkParams {
  const void* x;
  const float* scale;
  uint8_t* row;  // null if not rowwise
  uint8_t* col;  // null if not colwise
  float* scale_inv;
  float* amax;
  float* dbias;  // null if not with_dbias
  int64_t batch;
  int64_t rows;
  int64_t cols;
  int64_t col_tiles;      // ceil(cols / tile columns)
  int64_t nodes;          // row ranges per example
  int64_t rows_per_node;  // without dbias: rows of every range but the last
  // With dbias: node = kept * split + p.
  int64_t split;
  int64_t reduced_rows;  // rows per kept index = prod(reduced dims)
  walk::NestedAxes axes;
  int cluster_levels;       // 2^cluster_levels blocks per node
  int64_t merge_offset;     // dynamic shared memory layout, bytes
  int64_t staging_offset;
  bool vector_ok;      // 16-byte loads and kVec-byte row stores
  bool col_vector_ok;  // 16-byte transposed stores for whole chunks
  bool scale_from_amax;  // the amax kernel has run: scale from amax
};

// Word index in the staging tile of (chunk row, 4-byte word). The XOR spreads
// the 16-row blocks of one column word over distinct banks.
template <int kTileWords>
__device__ __forceinline__ int StagingWord(int row, int word) {
  constexpr int kSwizzleStep = 32 / kRowBlocks;
  return row * kTileWords + (word ^ (((row >> 4) % kRowBlocks) * kSwizzleStep));
}

// Writes the staged chunk (rows [chunk_row, chunk_row + h) of the example,
// tile columns [n0, n0 + width)) to col[j][i] = staged[i][j].
template <int kTileCols>
__device__ __forceinline__ void WriteTransposedChunk(
    const uint8_t* staging, int h, int64_t chunk_row, uint8_t* col,
    int64_t n0, int64_t width, int64_t rows, bool vector_ok) {
  constexpr int kTileWords = kTileCols / 4;
  const uint32_t* staged = reinterpret_cast<const uint32_t*>(staging);
  if (vector_ok && h == kChunkRows) {
    // Unit = 4 columns x 16 rows: 16 word loads, a 4x4 byte transpose per 4
    // rows, 4 16-byte stores. Lanes of a warp cover kRowBlocks row blocks of
    // 32 / kRowBlocks consecutive column groups: each store instruction
    // writes whole kChunkRows-byte runs of 32 / kRowBlocks output rows.
    constexpr int kUnits = kTileWords * kRowBlocks;
    for (int unit = threadIdx.x; unit < kUnits; unit += kWalkThreads) {
      const int block = unit % kRowBlocks;
      const int group = unit / kRowBlocks;
      if (4 * group >= width) continue;
      uint32_t w[16];
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        w[k] = staged[StagingWord<kTileWords>(block * 16 + k, group)];
      }
      uint32_t out[4][4];  // [column][4-row word]
      Transpose16x4(w, out);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t j = 4 * group + q;
        if (j < width) {
          // A plain store: a streaming one needs the whole 64-bit address
          // in registers for each of the 4 and spills this kernel.
          *reinterpret_cast<uint4*>(col + (n0 + j) * rows + chunk_row +
                                    block * 16) =
              make_uint4(out[q][0], out[q][1], out[q][2], out[q][3]);
        }
      }
    }
  } else {
    // Partial or unaligned chunk: bytes, consecutive lanes along a row of col.
    const uint8_t* bytes = staging;
    const int64_t total = width * h;
    for (int64_t idx = threadIdx.x; idx < total; idx += kWalkThreads) {
      const int j = static_cast<int>(idx / h);
      const int i = static_cast<int>(idx % h);
      const int word = StagingWord<kTileWords>(i, j / 4);
      col[(n0 + j) * rows + chunk_row + i] = bytes[word * 4 + j % 4];
    }
  }
}

// Stack levels of a DbiasStack kept in registers (the rest live in shared
// memory): 2 x kVec floats; the top of the stack, where most pushes and
// merges happen, is always in registers. More register levels cost more
// registers than they save in shared-memory traffic (ptxas: 2 levels and 8
// rows in flight fit 128 registers without spills; 4 levels do not).
constexpr int kRegLevels = 2;

// Rows loaded ahead per thread, and the occupancy the register budget is set
// for: 10 blocks (96 registers) without dbias, 8 (128 registers) with it;
// either way >= 64 KB of loads in flight per SM.
template <bool kDbias>
struct WalkShape {
  static constexpr int kUnroll = 8;
  static constexpr int kMinBlocks = kDbias ? 8 : 10;
};

template <typename In, Fp8Format kFormat, bool kCol, bool kDbias, int kUnroll>
__global__ void __launch_bounds__(kWalkThreads, WalkShape<kDbias>::kMinBlocks)
    WalkKernel(const __grid_constant__ WalkParams p) {
  using Storage = typename In::Storage;
  constexpr int kVec = In::kVec;
  constexpr int kTileCols = kWalkThreads * kVec;
  constexpr int kTileWords = kTileCols / 4;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float warp_max[kWalkThreads / 32];
  __shared__ uint8_t merges[kChunkRows];

  const int tid = threadIdx.x;
  int64_t bid = blockIdx.x;
  const unsigned group =
      static_cast<unsigned>(bid & ((int64_t{1} << p.cluster_levels) - 1));
  bid >>= p.cluster_levels;
  const int64_t tile = bid % p.col_tiles;
  bid /= p.col_tiles;
  const int64_t node = bid % p.nodes;
  const int64_t b = bid / p.nodes;

  // This block's rows: [first_row, first_row + row_count) of example b.
  int64_t first_row = 0;
  int64_t row_count = 0;
  int64_t kept = 0;
  int64_t part = 0;
  walk::Subtree root;
  walk::Subtree tree;
  if constexpr (kDbias) {
    kept = node / p.split;
    part = node % p.split;
    int64_t first_index = 0;
    root = walk::NodeRoot(p.axes, part, p.split, &first_index);
    tree = walk::DescendSubtree(p.axes, root, group, p.cluster_levels);
    first_row = kept * p.reduced_rows + first_index * p.axes.strides[0] +
                tree.first_row;
    row_count = tree.rows;
  } else {
    first_row = node * p.rows_per_node;
    row_count = min(p.rows_per_node, p.rows - first_row);
  }

  const int64_t cols = p.cols;
  const int64_t elements = p.rows * cols;
  const int64_t n0 = tile * kTileCols;
  const int64_t col0 = n0 + static_cast<int64_t>(tid) * kVec;
  const bool active = col0 < cols;
  const bool vector_lane = p.vector_ok && col0 + kVec <= cols;
  const float scale =
      ExampleScale<kFormat>(p.scale, p.amax, p.scale_from_amax, b);
  if (p.scale_from_amax && tile == 0 && node == 0 && group == 0 && tid == 0) {
    p.scale_inv[b] = ScaleInverse(scale);
  }
  const Storage* x = static_cast<const Storage*>(p.x) + b * elements;
  uint8_t* row_out = p.row != nullptr ? p.row + b * elements : nullptr;
  uint8_t* staging = smem + p.staging_offset;

  float amax = 0.0f;
  walk::DbiasStack<kVec, kRegLevels> stack;
  stack.overflow = reinterpret_cast<float*>(smem) + tid;
  stack.overflow_stride = kWalkThreads;

  const int64_t end_row = first_row + row_count;
  for (int64_t chunk_row = first_row; chunk_row < end_row;) {
    // Chunks are aligned to multiples of kChunkRows of the example's rows.
    const int64_t chunk_end =
        min(end_row, (chunk_row / kChunkRows + 1) * kChunkRows);
    const int h = static_cast<int>(chunk_end - chunk_row);
    __syncthreads();  // the previous chunk's staging and merges are consumed
    if constexpr (kDbias) {
      if (tid < h) {
        merges[tid] = static_cast<uint8_t>(
            walk::LeafMerges(p.axes, tree, chunk_row - first_row + tid));
      }
      __syncthreads();
    }
    const Storage* xr = x + chunk_row * cols + col0;
    for (int i0 = 0; i0 < h; i0 += kUnroll) {
      uint4 raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (i0 + u < h) {
          const Storage* src = xr + static_cast<int64_t>(i0 + u) * cols;
          if (vector_lane) {
            raw[u] = LoadStreaming(src);
          } else {
            const int64_t left = active ? cols - col0 : 0;
            raw[u] = LoadPacked<In>(src, static_cast<int>(left < kVec ? left : kVec));
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u;
        if (i < h) {
          float v[kVec];
          In::Unpack(raw[u], v);
#pragma unroll
          for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(v[e]));
          uint32_t q[kVec / 4];
          CastVec<kFormat>(v, scale, q);
          if (row_out != nullptr && active) {
            uint8_t* dst = row_out + (chunk_row + i) * cols + col0;
            if (vector_lane) {
              StoreCastWords(dst, q);
            } else {
#pragma unroll
              for (int e = 0; e < kVec; ++e) {
                if (col0 + e < cols) dst[e] = (q[e / 4] >> (8 * (e % 4))) & 0xFFu;
              }
            }
          }
          if constexpr (kCol) {
            const int word = StagingWord<kTileWords>(i, tid * (kVec / 4));
            StageCastWords(staging + 4 * word, q);
          }
          if constexpr (kDbias) stack.Leaf(v, merges[i]);
        }
      }
    }
    if constexpr (kCol) {
      __syncthreads();
      WriteTransposedChunk<kTileCols>(
          staging, h, chunk_row, p.col + b * elements, n0,
          min(static_cast<int64_t>(kTileCols), cols - n0), p.rows,
          p.col_vector_ok);
    }
    chunk_row = chunk_end;
  }

  if constexpr (kDbias) {
    float sum[kVec];
    stack.Result(sum);
    if (p.cluster_levels > 0) {
      // Subtree sums -> rank 0, merged pairwise in tree order (an empty right
      // subtree merges as the identity).
      cg::cluster_group cluster = cg::this_cluster();
      float* mine = reinterpret_cast<float*>(smem + p.merge_offset);
#pragma unroll
      for (int e = 0; e < kVec; ++e) mine[e * kWalkThreads + tid] = sum[e];
      cluster.sync();
      if (group == 0) {
        const unsigned groups = 1u << p.cluster_levels;
        for (unsigned width = 1; width < groups; width *= 2) {
          for (unsigned g = 0; g + width < groups; g += 2 * width) {
            const walk::Subtree right = walk::DescendSubtree(
                p.axes, root, g + width, p.cluster_levels);
            if (right.rows == 0) continue;
            float* left_sum = cluster.map_shared_rank(mine, g);
            const float* right_sum = cluster.map_shared_rank(mine, g + width);
#pragma unroll
            for (int e = 0; e < kVec; ++e) {
              const int k = e * kWalkThreads + tid;
              left_sum[k] = __fadd_rn(left_sum[k], right_sum[k]);
            }
          }
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum[e] = mine[e * kWalkThreads + tid];
      }
      cluster.sync();  // keep every rank's shared memory until rank 0 is done
    }
    if (group == 0 && active) {
      float* dst = p.dbias + ((b * (p.nodes / p.split) + kept) * p.split + part) *
                                 cols + col0;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        if (col0 + e < cols) dst[e] = CanonicalNan(sum[e]);
      }
    }
  }

  if (!p.scale_from_amax) {
    amax = BlockMax<kWalkThreads>(amax, warp_max);
    if (tid == 0) PublishAmax(p.amax + b, amax);
  }
}

template <typename In, Fp8Format kFormat, bool kCol, bool kDbias>
LaunchStatus LaunchWalkOf(const Fp8QuantizeProblem& problem,
                          const Fp8QuantizeBuffers& buffers,
                          cudaStream_t stream, int sms) {
  constexpr int kVec = In::kVec;
  constexpr int kTileCols = kWalkThreads * kVec;
  constexpr int kUnroll = WalkShape<kDbias>::kUnroll;
  WalkParams p = {};
  p.x = buffers.x;
  p.scale = buffers.scale;
  p.row = problem.rowwise ? buffers.row : nullptr;
  p.col = kCol ? buffers.col : nullptr;
  p.scale_inv = buffers.scale_inv;
  p.amax = buffers.amax;
  p.dbias = kDbias ? buffers.dbias : nullptr;
  p.scale_from_amax = problem.scale_from_amax;
  p.batch = problem.batch;
  p.rows = problem.rows;
  p.cols = problem.cols;
  p.col_tiles = (problem.cols + kTileCols - 1) / kTileCols;
  p.vector_ok = Aligned16(buffers.x) && problem.cols % kVec == 0 &&
                (p.row == nullptr || Aligned16(p.row));
  p.col_vector_ok = kCol && Aligned16(buffers.col) && problem.rows % 16 == 0;
  // Enough blocks for one full wave of resident blocks (at least).
  static const int blocks_per_sm = std::min(
      kWalkBlocksPerSm,
      BlocksPerSm(&WalkKernel<In, kFormat, kCol, kDbias, kUnroll>, kWalkThreads,
                  kCol ? kChunkRows * kTileCols : 0));
  const int64_t target = int64_t{sms} * blocks_per_sm;

  int64_t shared_bytes = 0;
  int cluster_levels = 0;
  if constexpr (kDbias) {
    if (!walk::BuildNestedAxes(problem.dbias_reduced_dims, &p.axes)) {
      return Invalid("more than 16 reduced axes of length > 1");
    }
    p.split = problem.dbias_split;
    p.nodes = problem.dbias_kept_rows * problem.dbias_split;
    int64_t reduced_rows = 1;
    for (int64_t d : problem.dbias_reduced_dims) reduced_rows *= d;
    p.reduced_rows = reduced_rows;
    // The largest node.
    const int64_t n = p.axes.dims[0];
    walk::Subtree largest;
    largest.count = (n + p.split - 1) / p.split;
    largest.rows = largest.count * p.axes.strides[0];
    const int bound = walk::StackBound(p.axes, largest);
    const int overflow_levels =
        std::max(0, bound - kRegLevels);
    const int64_t blocks = p.col_tiles * p.nodes * p.batch;
    while (cluster_levels < kMaxClusterLevels &&
           (blocks << cluster_levels) < target &&
           (largest.rows >> (cluster_levels + 1)) >= 2 * kChunkRows) {
      ++cluster_levels;
    }
    shared_bytes = int64_t{overflow_levels} * kVec * kWalkThreads * 4;
    p.merge_offset = shared_bytes;
    if (cluster_levels > 0) shared_bytes += int64_t{kVec} * kWalkThreads * 4;
  } else {
    // Row ranges of 128, 64 or 32 rows: the largest that still fills the GPU.
    int64_t rows_per_node = 4 * kChunkRows;
    while (rows_per_node > kChunkRows &&
           p.col_tiles * ((problem.rows + rows_per_node - 1) / rows_per_node) *
                   problem.batch <
               target) {
      rows_per_node /= 2;
    }
    p.rows_per_node = rows_per_node;
    p.nodes = (problem.rows + rows_per_node - 1) / rows_per_node;
    p.split = 1;
    p.merge_offset = 0;
  }
  p.cluster_levels = cluster_levels;
  p.staging_offset = shared_bytes;
  if (kCol) shared_bytes += int64_t{kChunkRows} * kTileCols;

  const int64_t grid =
      (p.col_tiles * p.nodes * p.batch) << cluster_levels;
  if (grid <= 0) return LaunchStatus{};
  if (grid > int64_t{0x7FFFFFFF}) {
    return Invalid("too many thread blocks (the tensor is too large)");
  }
  if (shared_bytes > 200 * 1024) {
    return Invalid("the dbias tree is too deep for shared memory");
  }
  const cudaError_t error =
      Launch(&WalkKernel<In, kFormat, kCol, kDbias, kUnroll>,
             dim3(static_cast<unsigned>(grid)), dim3(kWalkThreads),
             static_cast<size_t>(shared_bytes), stream, 1 << cluster_levels, p);
  if (error != cudaSuccess) return Failed(error, "launching WalkKernel");
  return LaunchStatus{};
}

}  // namespace

LaunchStatus LaunchWalk(const Fp8QuantizeProblem& problem,
                        const Fp8QuantizeBuffers& buffers, cudaStream_t stream,
                        int sms) {
  return DispatchTypes(problem, [&](auto input, auto format) {
    using In = decltype(input);
    constexpr Fp8Format kFormat = decltype(format)::value;
    if (problem.with_dbias) {
      if (problem.colwise) {
        return LaunchWalkOf<In, kFormat, true, true>(problem, buffers, stream, sms);
      }
      return LaunchWalkOf<In, kFormat, false, true>(problem, buffers, stream, sms);
    }
    return LaunchWalkOf<In, kFormat, true, false>(problem, buffers, stream, sms);
  });
}

}  // namespace eqx_quant::cuda::fp8
