// dbias + current scaling of a rowwise-only example in one cooperative launch
// (sm_90a): the dbias node sums and the amax in one read of x, grid-wide
// sync, scale, cast, node 0 finished. The float semantics are those of
// fp8_quantize_cuda.cu (bit-identical to the CPU kernel).
//
// Applies when the dbias reduces the rows of one example (one kept row, one
// reduced axis longer than 1) and its split leaves nodes of L = rows / split
// rows, L a power of two >= 4: each node's canonical tree is then the perfect
// pairwise tree over its rows.
//
// One block of kThreads (32 warps) per SM. A sub-tile is 128 rows x one slab
// of 32 16-byte vectors per row (256 bf16 / f16 or 128 f32 columns, 64 KiB).
// A work item is max(L, 128) rows x one slab (the node's 1 + (L - 1) / 128
// sub-tiles in row order); items are dealt round robin, block b taking items
// b, b + grid, ... (neighbouring slabs stream together).
//   Phase 1 copies the block's sub-tiles in order into a ring of kStages (3)
//   shared-memory stages with cp.async (warp w rows 4w .. 4w + 3, a warp
//   instruction 512 contiguous bytes of a row), kStages - 1 sub-tiles in
//   flight while one is summed. The sums read the stage in another order:
//   warp w takes 4 vectors in one 32-row quarter, its 8 lanes per vector the
//   quarter's 8 row groups of 4 rows. A thread's 4 rows are the perfect
//   subtree of its columns' 4 leaves, the quarter's 8 row groups 3 shuffle
//   levels (nodes of L <= 32 rows are stored at their level); for L >= 64
//   the quarters' 32-row sums go to shared memory (two buffers, alternating
//   per sub-tile) and after the next barrier one thread per column adds the
//   4 quarters (2 nodes of 64 rows, or the sub-tile's sum; for L >= 256
//   merged into the node's with a binary counter of pending sums per column
//   in that thread's registers). One barrier per sub-tile (the first
//   version, each thread summing its own copies, a column's 32 warp sums
//   added by one thread between two barriers, took 4.5-5.7 us longer at
//   8192^2 and 16384x4096 bf16). Node sums are written to dbias (NaN canonical). One
//   atomicMax per block, then a grid-wide sync.
//   Phase 2: the scale from the finished amax (block 0 writes scale_inv),
//   the cast of the sub-tiles last-read first: the ring's last kStages from
//   shared memory, then from x (L2 hits); then node 0 of the split := the
//   perfect tree over its nodes (split <= 64: 8 lanes per column, each the
//   perfect tree of split / 8 nodes, then 3 shuffles), by the last blocks.
//   L2 eviction priorities: the sub-tiles just before the ring's (about 60%
//   of the L2 over all blocks) evict_last in phase 1, the other reads and
//   phase 2's evict_first; the FP8 bytes go out with streaming stores.
// InitKernel (zeroed amax) runs before this launch in plain stream order.

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/float_narrow.h"
#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "kernels/fp8_quantize_cuda.h"
#include "kernels/fp8_quantize_cuda_device.cuh"
#include "kernels/fp8_quantize_cuda_launch.h"

namespace eqx_quant::cuda::fp8 {
namespace {

namespace cg = cooperative_groups;

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
  uint8_t* row;
  float* scale_inv;
  float* amax;   // zeroed by InitKernel
  float* dbias;  // split x cols node sums; node 0 finished in phase 2
  void* dbias_cast;  // node 0 in the input type, or null
  int64_t cols;
  int64_t row_vectors;  // cols / kVec
  int64_t slabs;        // ceil(row_vectors / kSlabVectors)
  int64_t items;        // rows / max(L, 128) * slabs
  int64_t split;        // dbias nodes (a power of two <= 64)
  int node_groups;      // 4-row groups per node: L / 4 if L < 128, else 32
  int node_subs_log2;   // log2 of a node's sub-tiles (0 if L <= 128)
  uint32_t grid;        // gridDim.x (a parameter: an operand, not a register)
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
// row-major over (row run, slab)).
__device__ __forceinline__ SubTile Locate(const DbiasCastParams& p,
                                          int64_t k) {
  // 32-bit division: the launcher takes this kernel only for < 2^31 items.
  const uint32_t item = static_cast<uint32_t>(
      blockIdx.x + (k >> p.node_subs_log2) * p.grid);
  const int part = static_cast<int>(k & ((int64_t{1} << p.node_subs_log2) - 1));
  const uint32_t run = item / static_cast<uint32_t>(p.slabs);
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
    StoreNode(p, t.row0 / (int64_t{kSubRows} << p.node_subs_log2), col, sum);
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
// others' cast (at the start of phase 2 it cost the op 1.2-3 us). With
// `cast` (not null), node 0 also goes there in the input type `type`.
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

template <typename In, Fp8Format kFormat>
__device__ __forceinline__ void CastSub(const DbiasCastParams& p,
                                        const SubTile& t,
                                        const uint4 (&raw)[kRowsPerThread],
                                        float scale) {
  constexpr int kVec = In::kVec;
  if (!LiveColumn(p, t)) return;
  const int64_t first = FirstVector(p, t);
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    float v[kVec];
    In::Unpack(raw[r], v);
    uint32_t q[kVec / 4];
    CastVec<kFormat>(v, scale, q);
    StoreCastWords(p.row + (first + r * p.row_vectors) * kVec, q);
  }
}

// The block's k-th sub-tile (of `count`) from its stage if the ring still
// holds it (the last kStages), else from x.
__device__ __forceinline__ void FetchSub(const DbiasCastParams& p,
                                         const uint4* stages, int64_t k,
                                         int64_t count, const SubTile& t,
                                         uint64_t policy,
                                         uint4 (&raw)[kRowsPerThread]) {
  if (k >= count - kStages) {
    const uint4* stage = stages + (k % kStages) * kSubVectors;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      raw[r] = stage[CopySlot(r)];
    }
  } else {
    LoadSub(p, t, policy, raw);
  }
}

template <typename In, Fp8Format kFormat>
__global__ void __launch_bounds__(kThreads, 1)
    DbiasCurrentCastKernel(const __grid_constant__ DbiasCastParams p) {
  constexpr int kSlabCols = kSlabVectors * In::kVec;
  // Dynamic shared memory: the kStages sub-tile stages, then the quarter
  // sums of two sub-tiles (2 x 4 x slab columns).
  extern __shared__ __align__(16) uint4 smem[];
  __shared__ float warp_max[kWarps];
  uint4* stages = smem;
  float* quarter_sums = reinterpret_cast<float*>(smem + kStages * kSubVectors);
  const int tid = threadIdx.x;
  const int64_t count =
      ((p.items - blockIdx.x + gridDim.x - 1) / gridDim.x) << p.node_subs_log2;
  auto sub = [&](int64_t k) { return Locate(p, k); };
  // L2: the sub-tiles that phase 2 re-reads first from x (those just before
  // the ring's last kStages) are kept over the others, and over the output.
  // (Phase 1 makes its policies where used: createpolicy is one instruction,
  // and two 64-bit values held through phase 1 made its 64 registers spill.)
  auto policy = [&](int64_t k) {
    return L2Policy(p.hints,
                    k < count - kStages && k >= count - kStages - p.l2_tiles);
  };
  // Sub-tile k into its stage (an empty commit group past the end, so that
  // every iteration waits for the same count of groups).
  auto issue = [&](int64_t k) {
    if (k < count) CopySub(p, sub(k), policy(k), stages + (k % kStages) * kSubVectors);
    AsyncCommit();
  };

  // Phase 1: kStages - 1 sub-tiles in flight while one is summed. A thread
  // sums other threads' copies, so one barrier per sub-tile k (after the
  // thread's own copies of k have landed) makes stage k visible; it also
  // orders the other shared data:
  //   * stage (k - 1) % kStages was read before it, so it can take sub-tile
  //     k + kStages - 1 right after (the ring's last kStages sub-tiles stay
  //     for phase 2);
  //   * the quarter sums of sub-tile k - 1 (written before it) are complete,
  //     and the column threads add them after it; those of sub-tile k go to
  //     the other of two buffers, whose readers (sub-tile k - 2) were done
  //     before it.
  float amax = 0.0f;
  float pending[kMaxLevels];
#pragma unroll
  for (int l = 0; l < kMaxLevels; ++l) pending[l] = 0.0f;
  const bool quartered = p.node_groups >= 16;
  // Sub-tile k's buffer of quarter sums.
  auto quarters = [&](int64_t k) {
    return quarter_sums + (k % 2) * (kQuarters * kSlabCols);
  };
  auto finish = [&](int64_t k) {
    const SubTile t = sub(k);
    const int64_t col = t.vec0 * In::kVec + tid;
    if (tid < kSlabCols && col < p.cols) {
      FinishSubTile(p, t, col,
                    quarters(k) + tid,
                    kSlabCols, pending);
    }
  };
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) issue(k);
  for (int64_t k = 0; k < count; ++k) {
    const SubTile t = sub(k);
    AsyncWaitGroup<kStages - 2>();  // this thread's copies of sub-tile k
    __syncthreads();
    if (quartered && k > 0) finish(k - 1);
    issue(k + kStages - 1);
    const uint4* stage = stages + (k % kStages) * kSubVectors;
    uint4 raw[kRowsPerThread];
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      raw[r] = stage[StageSlot(SumRowGroup(), SumVector(), r)];
    }
    float sums[In::kVec];
    SumRows<In>(raw, amax, sums);
    WarpTree<In::kVec>(p, t, t.vec0 + SumVector() < p.row_vectors, sums,
                       quarters(k));
  }
  if (quartered && count > 0) {
    __syncthreads();
    finish(count - 1);
  }
  AsyncWaitGroup<0>();
  amax = BlockMax<kThreads>(amax, warp_max);
  if (tid == 0 && amax > 0.0f) {
    atomicMax(reinterpret_cast<unsigned int*>(p.amax), __float_as_uint(amax));
  }
  cg::this_grid().sync();

  // Phase 2.
  constexpr int64_t kPerStep = In::kVec == 8 ? 2 : 1;
  const float scale = ScaleFromAmax(__ldcg(p.amax), *p.fallback, kFormat);
  if (blockIdx.x == 0 && tid == 0) *p.scale_inv = ScaleInverse(scale);
  const uint64_t drop_policy = L2Policy(p.hints, /*keep=*/false);
  for (int64_t k = count - 1; k >= 0; k -= kPerStep) {
    uint4 a[kRowsPerThread];
    uint4 b[kRowsPerThread];
    const SubTile ta = sub(k);
    FetchSub(p, stages, k, count, ta, drop_policy, a);
    const bool second = kPerStep == 2 && k >= 1;
    SubTile tb{};
    if (second) {
      tb = sub(k - 1);
      FetchSub(p, stages, k - 1, count, tb, drop_policy, b);
    }
    CastSub<In, kFormat>(p, ta, a, scale);
    if (second) CastSub<In, kFormat>(p, tb, b, scale);
  }
  FinishNodeZero(p.dbias, p.dbias_cast, In::kType, p.cols, p.split);
}

// Work items: max(L, 128)-row runs x column slabs.
int64_t ItemCount(const Fp8QuantizeProblem& problem, int64_t node_rows,
                  int64_t row_vectors) {
  return problem.rows / std::max<int64_t>(node_rows, kSubRows) *
         ((row_vectors + kSlabVectors - 1) / kSlabVectors);
}

int Log2(int64_t n) {
  int k = 0;
  while ((int64_t{1} << k) < n) ++k;
  return k;
}

template <typename In, Fp8Format kFormat>
LaunchStatus LaunchOf(const Fp8QuantizeProblem& problem,
                      const Fp8QuantizeBuffers& buffers, cudaStream_t stream,
                      int sms) {
  auto* kernel = &DbiasCurrentCastKernel<In, kFormat>;
  constexpr int64_t kSlabCols = int64_t{kSlabVectors} * In::kVec;
  const int64_t node_rows = problem.rows / problem.dbias_split;
  DbiasCastParams p;
  p.x = buffers.x;
  p.fallback = buffers.scale;
  p.row = buffers.row;
  p.scale_inv = buffers.scale_inv;
  p.amax = buffers.amax;
  p.dbias = buffers.dbias;
  p.dbias_cast = problem.dbias_cast ? buffers.dbias_cast : nullptr;
  p.cols = problem.cols;
  p.row_vectors = problem.cols / In::kVec;
  p.slabs = (p.row_vectors + kSlabVectors - 1) / kSlabVectors;
  p.split = problem.dbias_split;
  p.node_groups = static_cast<int>(std::min<int64_t>(node_rows, kSubRows) /
                                  kRowsPerThread);
  p.node_subs_log2 = Log2(std::max<int64_t>(node_rows / kSubRows, 1));
  p.items = ItemCount(problem, node_rows, p.row_vectors);

  const int optin =
      DeviceAttribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(48 * 1024);
  const size_t shared_bytes =
      static_cast<size_t>(kStages * kSubBytes + 2 * kQuarters * kSlabCols * 4);
  if (static_cast<int64_t>(shared_bytes) + kWarps * 4 > optin) {
    return Invalid("DbiasCurrentCastKernel needs 200 KiB of shared memory");
  }
  // At most one block per SM, all resident at once for the grid sync, and
  // none without a sub-tile.
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(sms, p.items));
  p.grid = static_cast<uint32_t>(grid);
  p.l2_tiles = L2TilesPerBlock(grid, kSubBytes);
  p.hints = UseL2Hints();
  cudaError_t error = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(shared_bytes));
  if (error != cudaSuccess) {
    return Failed(error, "setting DbiasCurrentCastKernel's shared memory");
  }
  if (BlocksPerSm(kernel, kThreads, shared_bytes) < 1) {
    return Invalid("DbiasCurrentCastKernel does not fit on an SM");
  }
  error = Launch(kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads),
                 shared_bytes, stream, 1, p, /*cooperative=*/true);
  if (error != cudaSuccess) {
    return Failed(error, "launching DbiasCurrentCastKernel");
  }
  return LaunchStatus{};
}

}  // namespace

bool DbiasCurrentCastApplies(const Fp8QuantizeProblem& problem,
                             const Fp8QuantizeBuffers& buffers) {
  const int vec = problem.input_type == InputType::kF32 ? 4 : 8;
  if (!TreeSumsApply(problem) || problem.batch != 1 || !problem.rowwise ||
      problem.colwise || problem.cols % vec != 0 ||
      problem.dbias_split > kMaxDbiasSplit || !Aligned16(buffers.x) ||
      !Aligned16(buffers.row)) {
    return false;
  }
  const int64_t node_rows = problem.rows / problem.dbias_split;
  const bool power_of_two = (node_rows & (node_rows - 1)) == 0;
  const int64_t items = ItemCount(problem, node_rows, problem.cols / vec);
  return power_of_two && node_rows >= kRowsPerThread &&
         problem.rows % kSubRows == 0 && items < (int64_t{1} << 31) &&
         node_rows <= (int64_t{kSubRows} << kMaxLevels);
}

LaunchStatus LaunchDbiasCurrentCast(const Fp8QuantizeProblem& problem,
                                    const Fp8QuantizeBuffers& buffers,
                                    cudaStream_t stream, int sms) {
  return DispatchTypes(problem, [&](auto input, auto format) {
    return LaunchOf<decltype(input), decltype(format)::value>(
        problem, buffers, stream, sms);
  });
}

}  // namespace eqx_quant::cuda::fp8
