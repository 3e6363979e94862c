// The sub-tile layout and phase 1 (the dbias node sums) of the dbias +
// current scaling kernel, DbiasCurrentCastKernel in
// fp8/dbias_current_cuda.cu, whose header comment describes the whole
// kernel: the launch parameters, where a block's k-th sub-tile lies, the two
// places of a thread in a sub-tile (copy and sum), the cp.async copy into a
// ring stage, the 4-row sums, the warp's shuffle tree, the 128-row sums and
// the binary counter of larger nodes, and node 0 of the split.

#ifndef EQX_QUANT_CSRC_FP8_DBIAS_NODE_SUMS_CUDA_CUH_
#define EQX_QUANT_CSRC_FP8_DBIAS_NODE_SUMS_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/float_narrow.h"
#include "common/magic_division.h"
#include "fp8/device_cuda.cuh"

namespace eqx_quant::cuda::fp8::dbias_current {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerThread = 4;
constexpr int kSubRows = kWarps * kRowsPerThread;  // 128
constexpr int kSlabVectors = 32;                   // 16-byte vectors per row
constexpr int kSubVectors = kThreads * kRowsPerThread;
constexpr int64_t kSubBytes = int64_t{kSubVectors} * 16;  // 64 KiB
// Shared-memory stages of phase 1's cp.async ring (kStages - 1 sub-tiles in
// flight while one is summed); the ring keeps the block's last kStages
// sub-tiles for phase 2.
constexpr int kStages = 3;
constexpr int kMaxLevels = 8;  // binary counter levels: L <= 128 * 2^8
constexpr int kFinishLanes = 8;  // lanes per column finishing node 0
constexpr int kQuarters = kSubRows / 32;  // 32-row quarters of a sub-tile

struct DbiasCastParams {
  const void* x;
  const float* fallback;  // the scale for an amax that is 0, NaN or Inf
  uint8_t* row;  // the rowwise copy, or null (kTranspose only)
  uint8_t* col;  // kTranspose: the transposed copy (col[n][m])
  float* scale_inv;
  float* amax;   // zeroed by InitKernel
  float* dbias;  // split x cols node sums; node 0 finished in phase 2
  void* dbias_cast;  // node 0 in the input type, or null
  int64_t rows;
  int64_t cols;
  int64_t row_vectors;  // cols / kVec
  int64_t slabs;        // ceil(row_vectors / kSlabVectors)
  int64_t items;        // rows / max(L, 128) * slabs
  int64_t split;        // dbias nodes (a power of two <= 64)
  int node_groups;      // 4-row groups per node: L / 4 if L < 128, else 32
  int node_subs_log2;   // log2 of a node's sub-tiles (0 if L <= 128)
  uint32_t grid;        // gridDim.x (a parameter: an operand, not a register)
  MagicDivisor slab_division;  // by slabs (Locate's, per sub-tile)
  int64_t l2_tiles;     // a block's last sub-tiles read with L2 evict_last
  bool hints;           // L2 eviction priorities (else evict_normal)
};

// A sub-tile: its place in x and in its node.
struct SubTile {
  int64_t row0;  // first row
  int64_t vec0;  // first 16-byte vector of the row (slab * kSlabVectors)
  int part;      // index of the sub-tile within its node (L > 128)
};

// The block's k-th sub-tile: sub-tile k % node_subs of its (k / node_subs)-th
// item, the grid's item blockIdx.x + (k / node_subs) * grid (items are
// row-major over (row run, slab)). 32-bit: the launcher takes this kernel
// only for < 2^31 sub-tiles. The division by slabs is a multiply-high by the
// launcher's magic number: a block locates up to 3 sub-tiles per step, and
// the division's instruction sequence would be a fifth of phase 1's
// instructions.
__device__ __forceinline__ SubTile Locate(const DbiasCastParams& p, int k) {
  const uint32_t item =
      blockIdx.x + static_cast<uint32_t>(k >> p.node_subs_log2) * p.grid;
  const int part = k & ((1 << p.node_subs_log2) - 1);
  const uint32_t run = MagicQuotient(item, p.slab_division);
  const int64_t slab = item - run * static_cast<uint32_t>(p.slabs);
  return SubTile{((int64_t{run} << p.node_subs_log2) + part) * kSubRows,
                 slab * kSlabVectors, part};
}

// Two places of a thread in a sub-tile.
// Copies (x -> stage, phase 2's loads and FP8 stores): warp w moves rows
// 4w .. 4w + 3, lane l vector l of the slab (a warp instruction: 512
// contiguous bytes of one row).
// Sums (phase 1, reading the stage): warp w takes the 4 vectors 4 (w % 8) ..
// of the slab in rows 32 (w / 8) .. + 31 (its quarter of the 128 rows), lane
// l the vector 4 (w % 8) + l / 8 in row group 8 (w / 8) + l % 8 (rows 4 x
// that .. + 3): the 8 row groups of a vector in a quarter are 8 neighbouring
// lanes, whose perfect tree is 3 shuffle levels.
// (Copying in the sums' order, 8 rows x 64 bytes per warp instruction, made
// the kernel twice as slow.)
__device__ __forceinline__ int SumVector() {
  return 4 * (static_cast<int>(threadIdx.x) / 32 % 8) +
         static_cast<int>(threadIdx.x) % 32 / 8;
}
__device__ __forceinline__ int SumRowGroup() {
  return 8 * (static_cast<int>(threadIdx.x) / 256) +
         static_cast<int>(threadIdx.x) % 8;
}

// Slot of (row group g, vector v, row r of the group) in a stage, in 16-byte
// units: vectors XOR-swizzled by g % 8, so that the 8 lanes of a sum thread's
// row groups read 8 distinct bank groups (and a copy warp's 32 vectors are a
// permutation of one row's slots).
__device__ __forceinline__ int StageSlot(int g, int v, int r) {
  return r * kThreads + g * kSlabVectors + (v ^ (g % 8));
}
__device__ __forceinline__ int CopySlot(int r) {
  return StageSlot(static_cast<int>(threadIdx.x) / 32,
                   static_cast<int>(threadIdx.x) % 32, r);
}

// This copy thread's vector column of the sub-tile is inside the rows.
__device__ __forceinline__ bool LiveColumn(const DbiasCastParams& p,
                                           const SubTile& t) {
  return t.vec0 + threadIdx.x % 32 < p.row_vectors;
}

// The index in x (in 16-byte vectors) of this copy thread's vector in the
// first of its kRowsPerThread rows of sub-tile t; the others follow
// row_vectors apart.
__device__ __forceinline__ int64_t FirstVector(const DbiasCastParams& p,
                                               const SubTile& t) {
  return (t.row0 + (threadIdx.x / 32) * kRowsPerThread) * p.row_vectors +
         t.vec0 + threadIdx.x % 32;
}

// cp.async of this copy thread's vectors of sub-tile t into `stage` (its
// slots CopySlot(r); zeros for a column past the rows' end).
__device__ __forceinline__ void CopySub(const DbiasCastParams& p,
                                        const SubTile& t, uint64_t policy,
                                        uint4* stage) {
  const uint4* x = static_cast<const uint4*>(p.x);
  const bool live = LiveColumn(p, t);
  const int64_t first = FirstVector(p, t);
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const uint4* src = live ? x + first + r * p.row_vectors : x;
    AsyncCopy16(stage + CopySlot(r), src, live, policy);
  }
}

// This copy thread's lines of sub-tile t prefetched into L2 with evict_last
// priority (lanes l % 8 == 0: one per 128-byte line, its first vector live).
__device__ __forceinline__ void PrefetchSubToL2(const DbiasCastParams& p,
                                                const SubTile& t) {
  if (threadIdx.x % 8 != 0 || !LiveColumn(p, t)) return;
  const uint4* x = static_cast<const uint4*>(p.x);
  const int64_t first = FirstVector(p, t);
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(
        x + first + r * p.row_vectors));
  }
}

// This copy thread's vectors of the sub-tile in `stage` (its slots
// CopySlot(r), as CopySub put them).
__device__ __forceinline__ void ReadCopySlots(const uint4* stage,
                                              uint4 (&raw)[kRowsPerThread]) {
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) raw[r] = stage[CopySlot(r)];
}

__device__ __forceinline__ void LoadSub(const DbiasCastParams& p,
                                        const SubTile& t, uint64_t policy,
                                        uint4 (&raw)[kRowsPerThread]) {
  const uint4* x = static_cast<const uint4*>(p.x);
  const bool live = LiveColumn(p, t);
  const int64_t first = FirstVector(p, t);
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    raw[r] = live ? LoadStreaming(x + first + r * p.row_vectors, policy)
                  : make_uint4(0u, 0u, 0u, 0u);
  }
}

// Phase 1 for one sub-tile held in raw: the amax and this thread's 4-row
// sums (the perfect subtree of its row group) per column of its vector.
template <typename In>
__device__ __forceinline__ void SumRows(const uint4 (&raw)[kRowsPerThread],
                                        float& amax, float (&s)[In::kVec]) {
  constexpr int kVec = In::kVec;
  float v[kRowsPerThread][kVec];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    In::Unpack(raw[r], v[r]);
#pragma unroll
    for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(v[r][e]));
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    s[e] = __fadd_rn(__fadd_rn(v[0][e], v[1][e]), __fadd_rn(v[2][e], v[3][e]));
  }
}

__device__ __forceinline__ void StoreNode(const DbiasCastParams& p,
                                          int64_t node, int64_t col,
                                          float value) {
  p.dbias[node * p.cols + col] = CanonicalNan(value);
}

template <int kVec>
__device__ __forceinline__ void StoreNodeVector(const DbiasCastParams& p,
                                                int64_t node, int64_t col0,
                                                const float (&s)[kVec]) {
#pragma unroll
  for (int e = 0; e < kVec; ++e) StoreNode(p, node, col0 + e, s[e]);
}

// The perfect tree of the warp's 8 row groups of each vector (32 rows), in
// 3 shuffle levels (1, 2, 4 lanes apart; an IEEE sum is commutative, so both
// lanes of a pair hold the same bits). Nodes of 4..32 rows are stored at
// their level by their first lane; for larger nodes lane l % 8 == 0 puts the
// 32-row sums in quarters[quarter][slab column] (uniform branches: the node
// size is the launch's).
template <int kVec>
__device__ __forceinline__ void WarpTree(const DbiasCastParams& p,
                                         const SubTile& t, bool live,
                                         float (&s)[kVec], float* quarters) {
  const int groups = p.node_groups;
  const int rg = static_cast<int>(threadIdx.x) % 8;
  const int64_t group = t.row0 / kRowsPerThread + SumRowGroup();
  const int64_t col0 = (t.vec0 + SumVector()) * kVec;
  if (groups == 1) {
    if (live) StoreNodeVector<kVec>(p, group, col0, s);
    return;
  }
#pragma unroll
  for (int d = 1; d <= 4; d *= 2) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      s[e] = __fadd_rn(s[e], __shfl_xor_sync(0xFFFFFFFFu, s[e], d));
    }
    if (groups == 2 * d) {
      if (live && rg % (2 * d) == 0) {
        StoreNodeVector<kVec>(p, group / (2 * d), col0, s);
      }
      return;
    }
  }
  if (rg == 0) {
    float* dst = quarters + (threadIdx.x / 256) * (kSlabVectors * kVec) +
                 SumVector() * kVec;
#pragma unroll
    for (int e = 0; e < kVec; e += 4) {
      *reinterpret_cast<float4*>(dst + e) =
          make_float4(s[e], s[e + 1], s[e + 2], s[e + 3]);
    }
  }
}

// One thread per slab column c (< the slab's live columns), for nodes of 64
// rows or more: the sub-tile's 4 quarter sums as its 2 nodes of 64 rows, or
// its 128-row sum; for L >= 256 that sum is merged into the node's binary
// counter (the pending left siblings per level, in the registers of the
// column's thread: the same thread takes column c of every sub-tile of its
// block).
__device__ __forceinline__ void FinishSubTile(const DbiasCastParams& p,
                                              const SubTile& t, int64_t col,
                                              const float* quarters,
                                              int quarter_stride,
                                              float (&pending)[kMaxLevels]) {
  const float low = __fadd_rn(quarters[0], quarters[quarter_stride]);
  const float high =
      __fadd_rn(quarters[2 * quarter_stride], quarters[3 * quarter_stride]);
  if (p.node_groups == 16) {
    StoreNode(p, t.row0 / 64, col, low);
    StoreNode(p, t.row0 / 64 + 1, col, high);
    return;
  }
  float sum = __fadd_rn(low, high);
  // Binary counter over the node's sub-tiles (a perfect tree: their count is
  // a power of two): merge with the pending left siblings of the levels below
  // the first 0 bit of `part`, lowest first. Unrolled with constant indices,
  // so that `pending` stays in registers.
  const int level = __ffs(~t.part) - 1;
#pragma unroll
  for (int l = 0; l < kMaxLevels; ++l) {
    if (l < level) sum = __fadd_rn(pending[l], sum);
  }
  if (level == p.node_subs_log2) {
    StoreNode(p, (t.row0 / kSubRows) >> p.node_subs_log2, col, sum);
  } else {
#pragma unroll
    for (int l = 0; l < kMaxLevels; ++l) {
      if (l == level) pending[l] = sum;
    }
  }
}

// Node 0 of the split := the perfect tree over all `split` nodes, per column:
// 8 lanes of the grid's threads take a column, lane i the perfect tree of
// nodes [i * per, (i + 1) * per) (per = split / 8, or 1 with split / 8 lanes
// when split < 8; missing nodes are -0.0, the identity, at the end), then a
// shuffle tree over the 8 lanes in order. Run after the block's cast: the
// columns go to the blocks from the last one down, which have one sub-tile
// fewer to cast when the items do not divide evenly (blockIdx.x >= items %
// gridDim.x), so the work fills their idle end instead of delaying the
// others' cast (as it does at the start of phase 2). With `cast` (not null),
// node 0 also goes there in the input type `type`.
__device__ __forceinline__ void FinishNodeZero(float* dbias, void* cast,
                                               InputType type, int64_t cols,
                                               int64_t split) {
  const int lane = threadIdx.x % kFinishLanes;
  const int per =
      split > kFinishLanes ? static_cast<int>(split / kFinishLanes) : 1;
  const unsigned group = 0xFFu << (threadIdx.x % 32 & ~7);
  const int64_t stride = int64_t{gridDim.x} * (kThreads / kFinishLanes);
  const int64_t block = gridDim.x - 1 - blockIdx.x;
  // Whole aligned 8-lane groups run each column or leave together.
  for (int64_t col = (block * kThreads + threadIdx.x) / kFinishLanes;
       col < cols; col += stride) {
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t node = int64_t{lane} * per + i;
      v[i] = i < per && node < split ? __ldcg(dbias + node * cols + col)
                                       : -0.0f;
    }
    PairwiseTree<8>(v);
    float sum = v[0];
#pragma unroll
    for (int d = 1; d < kFinishLanes; d *= 2) {
      const float right = __shfl_down_sync(group, sum, d, kFinishLanes);
      if (lane % (2 * d) == 0) sum = __fadd_rn(sum, right);
    }
    // Every lane has read its nodes (the shuffles above) before node 0 is
    // overwritten.
    if (lane == 0) {
      const float total = CanonicalNan(sum);
      dbias[col] = total;
      if (cast != nullptr) StoreNarrowed(type, cast, col, total);
    }
  }
}

}  // namespace eqx_quant::cuda::fp8::dbias_current

#endif  // EQX_QUANT_CSRC_FP8_DBIAS_NODE_SUMS_CUDA_CUH_
