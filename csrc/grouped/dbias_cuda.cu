// CUDA kernel of eqx_quant_grouped_dbias for sm_90a. Bit-exact with the CPU
// kernel (grouped/quantize_cpu.cc): dbias[g] = the canonical tree
// sum (common/tree_sum.h: split at ceil(n/2), IEEE f32 adds) of float(x) over
// the group's rows, +0 for an empty group, written in x's type (NaN
// canonical; common/float_narrow.h; the dense FP8 op's column sums: f32).
//
// DbiasTreeKernel. The canonical tree over a group's n rows is a perfect
// binary tree whose empty leaves count as -0.0, the exact identity of IEEE
// addition (grouped/dbias_tree_cuda.cuh, checked against TreeSum by
// its host test). A cluster of 2^c CTAs (c = 0..3) owns one (group, slab of
// 32 * kLaneCols columns): each lane adds kLaneCols columns (one 16-byte load
// per row for bf16 / f16 / f32 rows, or 1 column when the rows are not
// 16-byte vectors). The perfect tree is cut into
//   * c + 3 top levels: cluster rank, then warp (8 warps per CTA);
//   * s levels walked by each warp: 2^s chunks in row order, the chunk sums
//     merged with a binary counter (after chunk q, one merge per trailing one
//     bit of q; the pending sums in shared memory);
//   * 4 chunk levels: a chunk of 16 slots holds at most 16 rows; its rows
//     are loaded at once (up to 16 loads in flight per lane; an empty slot
//     is -0.0 and costs no load) and added as a perfect tree in registers,
//     fully unrolled.
// The 8 warp sums are added pairwise in shared memory, then the 2^c CTA sums
// through distributed shared memory (rank r finishing 1/2^c of the slab's
// columns). No row is read twice, no bookkeeping runs per row, and every
// group gets 2^c x 8 warps whatever its size.
//
// The same kernel serves the dense FP8 dbias with current scaling
// (LaunchColumnTreeSums, grouped/column_tree_sums_cuda.h): no group sizes,
// `groups` equal chunks of rows (the dbias tree's nodes at one depth), and
// each example's amax max |x| published with one atomicMax per CTA; and the
// MXFP8 op's dbias (kMx): the same sums, and in the same read every loaded
// row quantized to MXFP8 rowwise (a 32-element block is 4 lanes of 8
// bf16 / f16 columns or 8 lanes of 4 f32 columns: their key max by
// shuffles, the E8M0 byte from the block's first lane, the FP8 bytes by a
// streaming store), exactly as the MXFP8 kernels (mxfp8/device_cuda.cuh).

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/float_narrow.h"
#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "common/mxfp8_problem.h"
#include "cuda/sm_count.h"
#include "grouped/column_tree_mx_row_cuda.cuh"
#include "grouped/column_tree_sums_cuda.h"
#include "grouped/dbias_tree_cuda.cuh"
#include "grouped/device_cuda.cuh"
#include "grouped/quantize_cuda.h"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda {
namespace {

namespace cg = cooperative_groups;
namespace gdt = grouped_dbias_tree;
using namespace grouped_dev;  // NOLINT: the shared helpers of the grouped ops
using column_tree_mx::kMxBlock;
using column_tree_mx::MxRow;
using column_tree_mx::MxRowLeaf;
using column_tree_mx::MxRowOut;
using column_tree_mx::NoLeaf;
using mxfp8::Bf16In;
using mxfp8::F16In;
using mxfp8::F32In;

static_assert((1 << gdt::kWarpLevels) == kWarps, "one warp bit per warp");
constexpr int kMaxClusterLevels = 3;  // 8 CTAs: the portable cluster size
// What __launch_bounds__ asks for: 4 CTAs per SM (64 registers, no spills)
// keep the SM's loads going while other CTAs add, combine or start.
constexpr int kBlocksPerSm = 4;
// With the MXFP8 output: 2 CTAs per SM (128 registers: the chunk's 16
// vectors stay live through the quantization) and no clusters (enough CTAs
// are resident without them); more CTAs per SM spill. Rows K = 32 * 2^j take
// the MXFP8 tile kernel's 32-row sums instead (mxfp8/tile_cuda.cuh).
constexpr int kMxBlocksPerSm = 2;

// fn(In{}) for the input type's mxfp8 input struct; `otherwise` for an
// unknown type.
template <typename Fn, typename R>
R WithInputType(InputType type, Fn&& fn, R otherwise) {
  switch (type) {
    case InputType::kF32:
      return fn(F32In{});
    case InputType::kF16:
      return fn(F16In{});
    case InputType::kBF16:
      return fn(Bf16In{});
  }
  return otherwise;
}
// ClusterLevels' wave target: CTAs per SM per wave (tuned at 2 CTAs per SM).
constexpr int kWaveCtasPerSm = 2;
// Dynamic shared memory for the warps' binary counters (levels x lane
// columns x threads floats); deeper trees take the 1-column kernel.
constexpr int64_t kMaxStackBytes = 96 * 1024;

struct TreeParams {
  const void* x;
  const int32_t* group_sizes;  // null: `groups` chunks of rows / groups rows
  float* amax;                 // null, or per example (zeroed before)
  void* dbias;   // batch x G x N, of dbias_type
  InputType dbias_type;
  int64_t batch;
  int64_t rows;  // R
  int64_t cols;  // N
  int64_t groups;
  RowSpec rs;          // R, U
  int64_t col_tiles;   // ceil(N / slab)
  int cluster_levels;  // c: 2^c CTAs per (group, slab)
  uint8_t* mx_row;        // with kMx: batch x R x N FP8 bytes
  uint8_t* mx_row_scale;  // with kMx: batch x R x N / 32 E8M0 bytes
};

// The bits of a word of -0.0 elements (an empty slot).
template <typename In>
constexpr uint32_t kNegZeroWord =
    sizeof(typename In::Storage) == 2 ? 0x80008000u : 0x80000000u;

// If `live`, loads kLaneCols elements at p (16 bytes, or one element) into
// w; else leaves w (the -0.0 words of an empty slot). The 16-byte load is a
// predicated instruction, so that a chunk's loads issue back to back.
template <typename In, int kLaneCols>
__device__ __forceinline__ void LoadLane(const typename In::Storage* p,
                                         bool live, uint32_t (&w)[4]) {
  using Storage = typename In::Storage;
  if constexpr (kLaneCols * sizeof(Storage) == 16) {
    asm("{\n"
        "  .reg .pred live;\n"
        "  setp.ne.b32 live, %5, 0;\n"
        "  @live ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
        "}"
        : "+r"(w[0]), "+r"(w[1]), "+r"(w[2]), "+r"(w[3])
        : "l"(p), "r"(static_cast<int>(live)));
  } else {
    static_assert(kLaneCols == 1, "16-byte vectors or single elements");
    if (!live) return;
    if constexpr (sizeof(Storage) == 2) {
      w[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
    } else {
      w[0] = __float_as_uint(__ldg(reinterpret_cast<const float*>(p)));
    }
  }
}

// Loads slots [kLo, kLo + kN) of a chunk of `live` rows at `at` (advanced
// past the rows loaded); an empty slot is -0.0.
template <typename In, int kLaneCols, int kLo, int kN>
__device__ __forceinline__ void LoadSlots(uint32_t (&w)[gdt::kChunkSlots][4],
                                          const typename In::Storage*& at,
                                          int live, int64_t cols) {
#pragma unroll
  for (int j = kLo; j < kLo + kN; ++j) {
    const bool occupied = gdt::SlotKey(j) < live;
#pragma unroll
    for (int k = 0; k < 4; ++k) w[j][k] = kNegZeroWord<In>;
    LoadLane<In, kLaneCols>(at, occupied, w[j]);
    at += occupied ? cols : 0;
  }
}

// out = the perfect tree over slots [kLo, kLo + kN), per lane column; with
// kAmax, amax = max(amax, |leaf|) over the leaves (NaN ignored; an empty slot
// is 0). leaf(j, w[j]) runs on every slot j in increasing order, as the tree
// reaches it (so a slot's words die after its leaf: the MXFP8 output).
template <typename In, int kLaneCols, bool kAmax, int kLo, int kN,
          typename Leaf>
__device__ __forceinline__ void SlotTree(const uint32_t (&w)[gdt::kChunkSlots][4],
                                         float (&out)[kLaneCols], float& amax,
                                         Leaf& leaf) {
  if constexpr (kN == 1) {
    leaf(kLo, w[kLo]);
#pragma unroll
    for (int e = 0; e < kLaneCols; ++e) {
      out[e] = In::Element(w[kLo], e);
      if constexpr (kAmax) amax = fmaxf(amax, fabsf(out[e]));
    }
  } else {
    float left[kLaneCols];
    float right[kLaneCols];
    SlotTree<In, kLaneCols, kAmax, kLo, kN / 2>(w, left, amax, leaf);
    SlotTree<In, kLaneCols, kAmax, kLo + kN / 2, kN / 2>(w, right, amax, leaf);
#pragma unroll
    for (int e = 0; e < kLaneCols; ++e) out[e] = __fadd_rn(left[e], right[e]);
  }
}

// A perfect tree over 8 values, pairwise in index order.
__device__ __forceinline__ float Sum8(float (&s)[8]) {
#pragma unroll
  for (int width = 8; width > 1; width /= 2) {
#pragma unroll
    for (int i = 0; i < width / 2; ++i) s[i] = __fadd_rn(s[2 * i], s[2 * i + 1]);
  }
  return s[0];
}

// kAmax: also publish each example's amax (p.amax); the grouped dbias has none.
template <typename In, int kLaneCols, bool kAmax, MxRow kMx>
__global__ void __launch_bounds__(kThreads, kMx == MxRow::kNone
                                                ? kBlocksPerSm
                                                : kMxBlocksPerSm)
    DbiasTreeKernel(const __grid_constant__ TreeParams p) {
  using Storage = typename In::Storage;
  constexpr int kSlab = 32 * kLaneCols;  // columns per CTA
  static_assert(kSlab <= kThreads, "one thread per column in the combine");
  // stack[(level * kLaneCols + e) * kThreads + thread]: pending left sums.
  extern __shared__ float stack[];
  __shared__ float partial[kWarps][kSlab];
  __shared__ float cta_sum[kSlab];
  __shared__ int64_t warp_sums[kWarps];
  __shared__ float warp_max[kWarps];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int c = p.cluster_levels;
  const int top = c + gdt::kWarpLevels;
  const unsigned rank = blockIdx.x & ((1u << c) - 1);
  const int64_t g = blockIdx.x >> c;
  const int64_t N = p.cols;
  float* my_stack = stack + threadIdx.x;

  for (int64_t ex = blockIdx.z; ex < p.batch; ex += gridDim.z) {
    float amax = 0.0f;  // of the rows this CTA reads (published with p.amax)
    for (int64_t ct = blockIdx.y; ct < p.col_tiles; ct += gridDim.y) {
      const int64_t slab0 = ct * kSlab;
      const int slab_cols = static_cast<int>(min(int64_t{kSlab}, N - slab0));
      const int64_t col0 = slab0 + lane * kLaneCols;
      const bool valid = col0 < N;  // all kLaneCols columns (N % kLaneCols == 0)
      int64_t start;
      int64_t count;
      if (p.group_sizes != nullptr) {
        GroupSpan(p.group_sizes + ex * p.groups, g, p.rs, warp_sums, &start,
                  &count);
      } else {
        __syncthreads();  // `partial` of the previous slab has been read
        count = p.rows / p.groups;
        start = g * count;
      }
      const int64_t out = (ex * p.groups + g) * N + slab0;  // in p.dbias
      if (count == 0) {  // uniform in the cluster
        if (rank == 0 && static_cast<int>(threadIdx.x) < slab_cols) {
          StoreNarrowed(p.dbias_type, p.dbias, out + threadIdx.x, 0.0f);
        }
        continue;
      }
      // This warp's node and its 2^s chunks.
      int64_t begin;
      int64_t node_rows;
      gdt::DescendNode(count, (rank << gdt::kWarpLevels) | warp, top, &begin,
                       &node_rows);
      const int s = gdt::WarpChunkLevels(count, top);
      const int64_t first_row = ex * p.rows + start + begin;
      const Storage* base =
          static_cast<const Storage*>(p.x) + first_row * N + (valid ? col0 : 0);
      // kMx: where the chunk's first row goes (advanced with `base`).
      uint8_t* mx_row = nullptr;
      uint8_t* mx_scale = nullptr;
      if constexpr (kMx != MxRow::kNone) {
        mx_row = p.mx_row + first_row * N + (valid ? col0 : 0);
        mx_scale = p.mx_row_scale + first_row * (N / kMxBlock) +
                   (valid ? col0 / kMxBlock : 0);
      }
      float sum[kLaneCols];
#pragma unroll
      for (int e = 0; e < kLaneCols; ++e) sum[e] = -0.0f;
      const uint32_t chunks = 1u << s;
      for (uint32_t q = 0; q < chunks; ++q) {
        const int m = gdt::ChunkRows(node_rows, s, q);
        const int live = valid ? m : 0;
        uint32_t w[gdt::kChunkSlots][4];
        const Storage* at = base;
        float v[kLaneCols];
        LoadSlots<In, kLaneCols, 0, gdt::kChunkSlots>(w, at, live, N);
        base += m * N;
        if constexpr (kMx != MxRow::kNone) {
          constexpr Fp8Format kFormat = kMx == MxRow::kE4M3 ? Fp8Format::kE4M3Fn
                                                             : Fp8Format::kE5M2;
          MxRowLeaf<In, kFormat> leaf{m, valid, N, mx_row, mx_scale};
          SlotTree<In, kLaneCols, kAmax, 0, gdt::kChunkSlots>(w, v, amax, leaf);
          mx_row = leaf.row;
          mx_scale = leaf.scale;
        } else {
          NoLeaf leaf;
          SlotTree<In, kLaneCols, kAmax, 0, gdt::kChunkSlots>(w, v, amax, leaf);
        }
        // Binary counter: merge with the pending left sums this chunk ends.
        int level = 0;
        for (uint32_t t = q; (t & 1u) != 0; t >>= 1, ++level) {
#pragma unroll
          for (int e = 0; e < kLaneCols; ++e) {
            v[e] = __fadd_rn(my_stack[(level * kLaneCols + e) * kThreads],
                             v[e]);
          }
        }
        if (level < s) {
#pragma unroll
          for (int e = 0; e < kLaneCols; ++e) {
            my_stack[(level * kLaneCols + e) * kThreads] = v[e];
          }
        } else {
#pragma unroll
          for (int e = 0; e < kLaneCols; ++e) sum[e] = v[e];
        }
      }
#pragma unroll
      for (int e = 0; e < kLaneCols; ++e) {
        partial[warp][lane * kLaneCols + e] = sum[e];
      }
      __syncthreads();
      float cta = 0.0f;
      if (threadIdx.x < kSlab) {
        float s8[kWarps];
#pragma unroll
        for (int k = 0; k < kWarps; ++k) s8[k] = partial[k][threadIdx.x];
        cta = Sum8(s8);
      }
      if (c == 0) {
        if (static_cast<int>(threadIdx.x) < slab_cols) {
          StoreNarrowed(p.dbias_type, p.dbias, out + threadIdx.x, cta);
        }
        continue;  // GroupSpan's barriers keep `partial` until it is read
      }
      // The 2^c CTA sums: rank r finishes columns [r * kSlab / 2^c, ...).
      cg::cluster_group cluster = cg::this_cluster();
      if (threadIdx.x < kSlab) cta_sum[threadIdx.x] = cta;
      cluster.sync();
      const int share = kSlab >> c;
      if (static_cast<int>(threadIdx.x) < share) {
        const int col = static_cast<int>(rank) * share + threadIdx.x;
        float s8[1 << kMaxClusterLevels];
#pragma unroll
        for (int r = 0; r < (1 << kMaxClusterLevels); ++r) {
          // Ranks past 2^c pad the perfect tree over 8 with -0.0.
          s8[r] = r < (1 << c) ? cluster.map_shared_rank(cta_sum, r)[col]
                               : -0.0f;
        }
        const float total = Sum8(s8);
        if (col < slab_cols) {
          StoreNarrowed(p.dbias_type, p.dbias, out + col, total);
        }
      }
      cluster.sync();  // every rank's cta_sum is read before it changes
    }  // column slabs
    if constexpr (kAmax) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
      }
      if (lane == 0) warp_max[warp] = amax;
      __syncthreads();
      if (threadIdx.x == 0) {
#pragma unroll
        for (int k = 1; k < kWarps; ++k) amax = fmaxf(amax, warp_max[k]);
        // Non-negative floats order like their bits; NaN was ignored.
        if (amax > 0.0f) {
          atomicMax(reinterpret_cast<unsigned int*>(p.amax + ex),
                    __float_as_uint(amax));
        }
      }
      __syncthreads();  // warp_max is reused by the next example
    }
  }  // examples
}

template <typename In, int kLaneCols>
GroupedLaunchStatus LaunchTree(const TreeParams& p, MxRow mx, int stack_levels,
                               cudaStream_t stream) {
  auto* kernel = p.amax != nullptr
                     ? &DbiasTreeKernel<In, kLaneCols, true, MxRow::kNone>
                     : &DbiasTreeKernel<In, kLaneCols, false, MxRow::kNone>;
  if constexpr (kLaneCols == In::kVec) {  // the MXFP8 output: 16-byte lanes
    if (mx == MxRow::kE4M3) kernel = &DbiasTreeKernel<In, kLaneCols, false, MxRow::kE4M3>;
    if (mx == MxRow::kE5M2) kernel = &DbiasTreeKernel<In, kLaneCols, false, MxRow::kE5M2>;
  }
  const int64_t stack_bytes =
      int64_t{stack_levels} * kLaneCols * kThreads * int64_t{sizeof(float)};
  if (stack_bytes > 48 * 1024) {
    const cudaError_t error =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(stack_bytes));
    if (error != cudaSuccess) {
      return Fail(error, "raising the shared memory of DbiasTreeKernel");
    }
  }
  const int64_t cluster = int64_t{1} << p.cluster_levels;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim =
      dim3(static_cast<unsigned>(p.groups * cluster),
           static_cast<unsigned>(std::min<int64_t>(p.col_tiles, 65535)),
           static_cast<unsigned>(std::min<int64_t>(p.batch, 65535)));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(stack_bytes);
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = cluster > 1 ? 1 : 0;
  return Fail(cudaLaunchKernelEx(&config, kernel, p),
              "launching the grouped DbiasTreeKernel");
}

// The cluster size: enough CTAs for about 4 waves of resident CTAs (so that
// groups of different sizes even out), while an average group still gives
// each warp a chunk of 16 rows.
int ClusterLevels(const GroupedView& v, int64_t col_tiles) {
  const int64_t ctas = v.groups * std::min<int64_t>(col_tiles, 65535) *
                       std::min<int64_t>(v.batch, 65535);
  const int64_t target = int64_t{SmCount()} * kWaveCtasPerSm * 4;
  const int64_t group_rows = v.rows / std::max<int64_t>(v.groups, 1);
  int c = 0;
  while (c < kMaxClusterLevels && (ctas << c) < target &&
         (group_rows >> (c + 1 + gdt::kWarpLevels)) >= gdt::kChunkSlots) {
    ++c;
  }
  return c;
}

// The 16-byte lanes: every row a run of aligned 16-byte vectors and the
// warps' binary counters within kMaxStackBytes. `levels`: their depth.
// clusters: whether the CTAs of a (group, slab) may form a cluster (the
// MXFP8 output does without: with 2 CTAs per SM enough CTAs are resident).
template <typename In>
bool SixteenByteLanes(const GroupedView& v, const void* x, int64_t longest,
                      bool clusters, int* cluster_levels, int* levels) {
  constexpr int kVec = In::kVec;  // elements per 16 bytes
  *cluster_levels =
      clusters ? ClusterLevels(v, grouped::CeilDiv(v.cols, int64_t{32 * kVec})) : 0;
  *levels = gdt::MaxWarpChunkLevels(longest, *cluster_levels + gdt::kWarpLevels);
  return v.cols % kVec == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         int64_t{*levels} * kVec * kThreads * 4 <= kMaxStackBytes;
}

// mx: the MXFP8 rowwise output (format kNone, or with it amax is null and
// SixteenByteLanes holds).
template <typename In>
GroupedLaunchStatus LaunchForType(const GroupedView& v,
                                  const GroupedDbiasBuffers& buffers,
                                  float* amax, const MxRowOut& mx,
                                  cudaStream_t stream) {
  constexpr int kVec = In::kVec;  // elements per 16 bytes
  TreeParams p{};
  p.x = buffers.x;
  p.group_sizes = buffers.group_sizes;
  p.amax = amax;
  p.dbias = buffers.dbias;
  p.dbias_type = buffers.dbias_type;
  p.batch = v.batch;
  p.rows = v.rows;
  p.cols = v.cols;
  p.groups = v.groups;
  p.rs = RowSpec::Make(v.rows, v.rows_per_unit);
  p.mx_row = mx.row;
  p.mx_row_scale = mx.row_scale;
  // The largest group: any up to R rows, or the equal chunks.
  const int64_t longest =
      buffers.group_sizes != nullptr ? v.rows : v.rows / v.groups;
  int levels = 0;
  if (SixteenByteLanes<In>(v, buffers.x, longest, mx.format == MxRow::kNone,
                           &p.cluster_levels, &levels)) {
    p.col_tiles = grouped::CeilDiv(v.cols, int64_t{32 * kVec});
    return LaunchTree<In, kVec>(p, mx.format, levels, stream);
  }
  if (mx.format != MxRow::kNone) {
    return Unsupported("the MXFP8 output needs rows of aligned 16-byte vectors");
  }
  p.col_tiles = grouped::CeilDiv(v.cols, int64_t{32});
  p.cluster_levels = ClusterLevels(v, p.col_tiles);
  levels = gdt::MaxWarpChunkLevels(longest,
                                   p.cluster_levels + gdt::kWarpLevels);
  if (levels > 30) return Unsupported("too many rows (more than 2^37)");
  return LaunchTree<In, 1>(p, MxRow::kNone, levels, stream);
}

GroupedLaunchStatus LaunchTreeSums(const GroupedView& v,
                                   const GroupedDbiasBuffers& buffers,
                                   float* amax, const MxRowOut& mx,
                                   cudaStream_t stream) {
  if (v.batch == 0 || v.cols == 0 || v.groups == 0) {
    return GroupedLaunchStatus{};
  }
  if ((v.groups << kMaxClusterLevels) > int64_t{0x7FFFFFFF}) {
    return Unsupported("too many groups (2^28 or more)");
  }
  return WithInputType(
      v.input_type,
      [&](auto input) {
        return LaunchForType<decltype(input)>(v, buffers, amax, mx, stream);
      },
      Unsupported("unknown input type"));
}

GroupedView ColumnTreeView(const ColumnTreeSums& problem) {
  GroupedView v;
  v.input_type = problem.input_type;
  v.batch = problem.batch;
  v.rows = problem.rows;
  v.cols = problem.cols;
  v.groups = problem.nodes;
  return v;
}

}  // namespace

GroupedLaunchStatus GroupedDbias(const GroupedDbiasProblem& problem,
                                 const GroupedDbiasBuffers& buffers,
                                 CUstream_st* stream) {
  return LaunchTreeSums(problem.view, buffers, nullptr, MxRowOut{}, stream);
}

bool ColumnTreeSumsTakeMxfp8(const ColumnTreeSums& problem) {
  if (problem.nodes <= 0 || problem.rows % problem.nodes != 0 ||
      problem.cols % kMxBlock != 0 || problem.amax != nullptr) {
    return false;
  }
  const GroupedView v = ColumnTreeView(problem);
  const int64_t longest = problem.rows / problem.nodes;
  int cluster_levels = 0;
  int levels = 0;
  return WithInputType(
      problem.input_type,
      [&](auto input) {
        return SixteenByteLanes<decltype(input)>(v, problem.x, longest, false,
                                                 &cluster_levels, &levels);
      },
      false);
}

GroupedLaunchStatus LaunchColumnTreeSums(const ColumnTreeSums& problem,
                                         CUstream_st* stream) {
  if (problem.nodes <= 0 || problem.rows % problem.nodes != 0) {
    return Unsupported("column tree sums need rows divisible by nodes");
  }
  MxRowOut mx;
  if (problem.mx_row != nullptr) {
    if (!ColumnTreeSumsTakeMxfp8(problem)) {
      return Unsupported("the MXFP8 output does not fit the column tree sums");
    }
    mx.format =
        problem.mx_format == Fp8Format::kE4M3Fn ? MxRow::kE4M3 : MxRow::kE5M2;
    mx.row = problem.mx_row;
    mx.row_scale = problem.mx_row_scale;
  }
  GroupedDbiasBuffers buffers;
  buffers.x = problem.x;
  buffers.dbias = problem.sums;  // f32 (dbias_type's default)
  return LaunchTreeSums(ColumnTreeView(problem), buffers, problem.amax, mx,
                        stream);
}

}  // namespace eqx_quant::cuda
