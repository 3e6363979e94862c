// dbias + current scaling of one example in one cooperative launch (sm_90a):
// the dbias node sums and the amax in one read of x, grid-wide sync, scale,
// cast (rowwise, transposed or both), node 0 finished. The float semantics
// are those of fp8/quantize_cuda.cu (bit-identical to the CPU kernel).
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
//   in that thread's registers). One barrier per sub-tile (cheaper than
//   each thread summing its own copies and one thread adding a column's 32
//   warp sums between two barriers). Node sums are written to dbias (NaN
//   canonical). One atomicMax per block (kTranspose: then an L2 prefetch of
//   the first sub-tile phase 2 will re-read from DRAM), then a grid-wide
//   sync.
//   Phase 2: the scale from the finished amax (block 0 writes scale_inv),
//   the cast of the sub-tiles last-read first: the ring's last kStages from
//   shared memory, then from x (L2 hits); then node 0 of the split := the
//   perfect tree over its nodes (split <= 64: 8 lanes per column, each the
//   perfect tree of split / 8 nodes, then 3 shuffles), by the last blocks.
//   kTranspose (the transposed copy wanted, the rowwise one optional): one
//   sub-tile per step, first (from 5 sub-tiles per block) the one read just
//   before the ring's, which phase 1 left in each thread's registers; its FP8
//   bytes also go to a staging tile (StagedFp8Tile, 32 KiB for 2-byte inputs,
//   16 KiB for f32, where phase 1 kept its quarter sums), and after a barrier
//   the block writes out its transpose (col[n][m], 16-byte streaming stores).
//   The sub-tiles before the held one come by cp.async, each issued kStages
//   steps before its own into the stage that step's sub-tile leaves, so that
//   kStages copies overlap the cast and the write-out. This replaces the
//   two-launch path (the column tree sums, then the cast + transpose) for these
//   problems.
//   L2 eviction priorities: the sub-tiles just before the held one and the
//   ring's (about 60% of the L2 over all blocks) evict_last in phase 1, the
//   other reads and phase 2's evict_first; the FP8 bytes go out with
//   streaming stores.
// !kDbias (current scaling with the transposed copy, no dbias,
// RingCurrentTransposeTakes): the same kernel without the sums: sub-tiles
// of 128 rows (items = 128-row runs x slabs), phase 1 folds each thread's own
// copies into the amax (no barrier per sub-tile), phase 2 as above. Against
// the whole-tile cast + transpose kernel (CurrentTransposeTileKernel, whose
// phase 1 reads all of x and phase 2 re-reads all of it, part from L2), the
// ring's last sub-tiles (192 KiB per SM, ~25 MB on an H200) are not read
// twice.
// InitKernel (zeroed amax) runs before this launch in plain stream order.

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/ceil_log2.h"
#include "common/float_narrow.h"
#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "fp8/dbias_node_sums_cuda.cuh"
#include "fp8/device_cuda.cuh"
#include "fp8/launch_cuda.h"
#include "fp8/quantize_cuda.h"

namespace eqx_quant::cuda::fp8 {
namespace {

namespace cg = cooperative_groups;

using namespace dbias_current;  // NOLINT(build/namespaces)

// The cast of sub-tile t held in raw: the rowwise bytes (unless p.row is
// null) and, kTranspose, this copy thread's words in the staging tile of the
// sub-tile's transposed write-out.
template <typename In, Fp8Format kFormat, bool kTranspose>
__device__ __forceinline__ void CastSub(const DbiasCastParams& p,
                                        const SubTile& t,
                                        const uint4 (&raw)[kRowsPerThread],
                                        float scale, uint32_t* staging) {
  constexpr int kVec = In::kVec;
  using Staged = StagedFp8Tile<kSlabVectors * kVec>;
  if (!LiveColumn(p, t)) return;
  const int64_t first = FirstVector(p, t);
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    float v[kVec];
    In::Unpack(raw[r], v);
    uint32_t q[kVec / 4];
    CastVec<kFormat>(v, scale, q);
    if (!kTranspose || p.row != nullptr) {
      StoreCastWords(p.row + (first + r * p.row_vectors) * kVec, q);
    }
    if constexpr (kTranspose) {
      const int row = static_cast<int>(threadIdx.x) / 32 * kRowsPerThread + r;
      const int word = static_cast<int>(threadIdx.x) % 32 * (kVec / 4);
      StageCastWords(&staging[Staged::Staged(row, word)], q);
    }
  }
}

// Stage k % kStages: the block's k-th sub-tile's in phase 1 and in the
// ring; phase 2's re-reads after a held sub-tile pass k + 1.
template <typename Stage>
__device__ __forceinline__ Stage* StageOf(Stage* stages, int k) {
  return stages + (k % kStages) * kSubVectors;
}

// The block's k-th sub-tile (of `count`) from its stage if the ring still
// holds it (the last kStages), else from x.
__device__ __forceinline__ void FetchSub(const DbiasCastParams& p,
                                         const uint4* stages, int k,
                                         int count, const SubTile& t,
                                         uint64_t policy,
                                         uint4 (&raw)[kRowsPerThread]) {
  if (k >= count - kStages) {
    ReadCopySlots(StageOf(stages, k), raw);
  } else {
    LoadSub(p, t, policy, raw);
  }
}

template <typename In, Fp8Format kFormat, bool kDbias, bool kTranspose>
__global__ void __launch_bounds__(kThreads, 1)
    DbiasCurrentCastKernel(const __grid_constant__ DbiasCastParams p) {
  constexpr int kSlabCols = kSlabVectors * In::kVec;
  // Dynamic shared memory: the kStages sub-tile stages, then phase 1's
  // quarter sums of two sub-tiles (2 x 4 x slab columns), phase 2's staging
  // tile (kTranspose).
  extern __shared__ __align__(16) uint4 smem[];
  __shared__ float warp_max[kWarps];
  uint4* stages = smem;
  float* quarter_sums = reinterpret_cast<float*>(smem + kStages * kSubVectors);
  const int tid = threadIdx.x;
  // The block's sub-tiles (< 2^31, as all of them: the launcher's bound).
  const int count = static_cast<int>(
      ((p.items - blockIdx.x + gridDim.x - 1) / gridDim.x) << p.node_subs_log2);
  auto sub = [&](int k) { return Locate(p, k); };
  // kTranspose: the sub-tile just before the ring's (count - kStages - 1)
  // stays in each thread's registers (its copy slots, 16 registers) from
  // phase 1 to the first step of phase 2: one sub-tile per SM more of x on
  // chip (8.6 MB on an H200), one fewer re-read from x. Only from
  // kStages + 2 sub-tiles per block: with fewer, x sits in L2 anyway and the
  // held registers cost more than the re-read saves.
  const int held_k =
      kTranspose && count > kStages + 1 ? count - kStages - 1 : -1;
  // Phase 2 re-reads sub-tiles k < reread_end from x, the last one first.
  const int reread_end = held_k >= 0 ? held_k : count - kStages;
  // L2: the sub-tiles that phase 2 re-reads first from x (those just before
  // the held one and the ring's last kStages) are kept over the others, and
  // over the output.
  // (Phase 1 makes its policies where used: createpolicy is one instruction,
  // and two 64-bit values held through phase 1 made its 64 registers spill.)
  auto policy = [&](int k) {
    return L2Policy(p.hints, k < reread_end && k >= reread_end - p.l2_tiles);
  };
  // Sub-tile k into its stage (an empty commit group past the end, so that
  // every iteration waits for the same count of groups).
  auto issue = [&](int k) {
    if (k < count) CopySub(p, sub(k), policy(k), StageOf(stages, k));
    AsyncCommit();
  };

  // Phase 1: kStages - 1 sub-tiles in flight while one is read. kDbias: a
  // thread sums other threads' copies, so one barrier per sub-tile k (after
  // the thread's own copies of k have landed) makes stage k visible; it also
  // orders the other shared data:
  //   * stage (k - 1) % kStages was read before it, so it can take sub-tile
  //     k + kStages - 1 right after (the ring's last kStages sub-tiles stay
  //     for phase 2);
  //   * the quarter sums of sub-tile k - 1 (written before it) are complete,
  //     and the column threads add them after it; those of sub-tile k go to
  //     the other of two buffers, whose readers (sub-tile k - 2) were done
  //     before it.
  // !kDbias: each thread reads back only its own copies, so no barrier (the
  // stage it refills held its own slots of sub-tile k - 1, read and folded
  // in the last iteration).
  float amax = 0.0f;
  uint4 held[kRowsPerThread];
  float pending[kMaxLevels];
#pragma unroll
  for (int l = 0; l < kMaxLevels; ++l) pending[l] = 0.0f;
  const bool quartered = kDbias && p.node_groups >= 16;
  // Sub-tile k's buffer of quarter sums.
  auto quarters = [&](int k) {
    return quarter_sums + (k % 2) * (kQuarters * kSlabCols);
  };
  auto finish = [&](int k) {
    if (tid >= kSlabCols) return;  // whole warps
    const SubTile t = sub(k);
    const int64_t col = t.vec0 * In::kVec + tid;
    if (col < p.cols) {
      FinishSubTile(p, t, col,
                    quarters(k) + tid,
                    kSlabCols, pending);
    }
  };
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) issue(k);
  for (int k = 0; k < count; ++k) {
    const SubTile t = sub(k);
    AsyncWaitGroup<kStages - 2>();  // this thread's copies of sub-tile k
    if constexpr (kDbias) {
      __syncthreads();
      if (quartered && k > 0) finish(k - 1);
    }
    issue(k + kStages - 1);
    const uint4* stage = StageOf(stages, k);
    uint4 raw[kRowsPerThread];
    if constexpr (kDbias) {
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        raw[r] = stage[StageSlot(SumRowGroup(), SumVector(), r)];
      }
      float sums[In::kVec];
      SumRows<In>(raw, amax, sums);
      if (kTranspose && k == held_k) ReadCopySlots(stage, held);
      WarpTree<In::kVec>(p, t, t.vec0 + SumVector() < p.row_vectors, sums,
                         quarters(k));
    } else {
      ReadCopySlots(stage, raw);  // zeros past the rows' end
      amax = FoldAbsMax<In>(raw, amax);
      if (kTranspose && k == held_k) {
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) held[r] = raw[r];
      }
    }
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
  // kDbias && kTranspose: while the block waits at the grid sync, the sub-tile
  // that phase 2 re-reads right after the L2-kept ones is prefetched into L2
  // (evict_last): the dbias sums leave DRAM partly idle in phase 1's tail,
  // where the slowest blocks finish (without dbias the tail is too short to
  // gain from it).
  if constexpr (kDbias && kTranspose) {
    const int next = reread_end - static_cast<int>(p.l2_tiles) - 1;
    if (p.hints && next >= 0) PrefetchSubToL2(p, sub(next));
  }
  cg::this_grid().sync();

  // Phase 2.
  constexpr int kPerStep = In::kVec == 8 ? 2 : 1;
  const float scale = ScaleFromAmax(__ldcg(p.amax), *p.fallback, kFormat);
  if (blockIdx.x == 0 && tid == 0) *p.scale_inv = ScaleInverse(scale);
  const uint64_t drop_policy = L2Policy(p.hints, /*keep=*/false);
  if constexpr (kTranspose) {
    // One sub-tile per step, last-read first, sub-tile k in stage
    // k % kStages: the ring's from phase 1, each other one copied by
    // cp.async kStages steps before it into the stage that step's sub-tile
    // leaves, so that kStages sub-tiles are in flight while one is cast
    // (current rowwise + transposed at 8192^2 bf16 with one in flight: 103.9
    // us, two: 102.6, three: 101.4). The staging tile is the shared memory
    // after the stages (phase 1's quarter sums).
    using Staged = StagedFp8Tile<kSlabCols>;
    uint32_t* staging = reinterpret_cast<uint32_t*>(quarter_sums);
    auto cast_step = [&](const SubTile& t, const uint4 (&raw)[kRowsPerThread]) {
      CastSub<In, kFormat, true>(p, t, raw, scale, staging);
      __syncthreads();
      for (int unit = tid; unit < Staged::kUnits; unit += kThreads) {
        Staged::template WriteTransposedUnit<true>(
            staging, unit, p.col, p.rows, p.cols, t.row0, t.vec0 * In::kVec);
      }
    };
    // The held sub-tile first (no stage read, no copy issued). The sub-tiles
    // cast after the ring's (k < held_k) then take stage (k + 1) % kStages:
    // each is still copied kStages steps ahead of its own into the stage
    // just read.
    if (held_k >= 0) cast_step(sub(held_k), held);
    const int shift = held_k >= 0 ? 1 : 0;
    for (int k = count - 1; k >= 0; --k) {
      if (k == held_k) continue;
      const bool ring = k >= count - kStages;
      // This thread's copies of k (each step in the loop commits one group,
      // empty or not: the last kStages - 1 may still be in flight).
      if (!ring) AsyncWaitGroup<kStages - 1>();
      uint4 raw[kRowsPerThread];
      ReadCopySlots(StageOf(stages, ring ? k : k + shift), raw);
      // Every thread has read this step's stage, and the last step's staging
      // tile is written out.
      __syncthreads();
      const int ahead = k - kStages - (ring ? shift : 0);
      if (ahead >= 0) {
        CopySub(p, sub(ahead), drop_policy, StageOf(stages, ahead + shift));
      }
      AsyncCommit();
      cast_step(sub(k), raw);
    }
  } else {
    for (int k = count - 1; k >= 0; k -= kPerStep) {
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
      CastSub<In, kFormat, false>(p, ta, a, scale, nullptr);
      if (second) CastSub<In, kFormat, false>(p, tb, b, scale, nullptr);
    }
  }
  if constexpr (kDbias) {
    FinishNodeZero(p.dbias, p.dbias_cast, In::kType, p.cols, p.split);
  }
}

// Work items: max(L, 128)-row runs x column slabs.
int64_t ItemCount(const Fp8QuantizeProblem& problem, int64_t node_rows,
                  int64_t row_vectors) {
  return problem.rows / std::max<int64_t>(node_rows, kSubRows) *
         ((row_vectors + kSlabVectors - 1) / kSlabVectors);
}

// The sub-tiles of all of x (128 rows x one slab each), below kMaxSubTiles
// for either kernel: Locate's and the kernel's counters are 32-bit.
constexpr int64_t kMaxSubTiles = int64_t{1} << 31;
int64_t SubTileCount(const Fp8QuantizeProblem& problem) {
  return ItemCount(problem, kSubRows,
                   problem.cols / VectorElements(problem.input_type));
}

template <typename In, Fp8Format kFormat, bool kDbias, bool kTranspose>
LaunchStatus LaunchOf(const Fp8QuantizeProblem& problem,
                      const Fp8QuantizeBuffers& buffers, cudaStream_t stream,
                      int sms) {
  auto* kernel = &DbiasCurrentCastKernel<In, kFormat, kDbias, kTranspose>;
  constexpr int64_t kSlabCols = int64_t{kSlabVectors} * In::kVec;
  // Without dbias: one node of 128 rows per run (only the items matter).
  const int64_t node_rows =
      kDbias ? problem.rows / problem.dbias_split : int64_t{kSubRows};
  DbiasCastParams p;
  p.x = buffers.x;
  p.fallback = buffers.scale;
  p.row = problem.rowwise ? buffers.row : nullptr;
  p.col = kTranspose ? buffers.col : nullptr;
  p.scale_inv = buffers.scale_inv;
  p.amax = buffers.amax;
  p.dbias = kDbias ? buffers.dbias : nullptr;
  p.dbias_cast = kDbias && problem.dbias_cast ? buffers.dbias_cast : nullptr;
  p.rows = problem.rows;
  p.cols = problem.cols;
  p.row_vectors = problem.cols / In::kVec;
  p.slabs = (p.row_vectors + kSlabVectors - 1) / kSlabVectors;
  p.split = kDbias ? problem.dbias_split : 1;
  p.node_groups = static_cast<int>(std::min<int64_t>(node_rows, kSubRows) /
                                  kRowsPerThread);
  p.node_subs_log2 = CeilLog2(std::max<int64_t>(node_rows / kSubRows, 1));
  p.items = ItemCount(problem, node_rows, p.row_vectors);
  p.slab_division = MakeMagicDivisor(static_cast<uint32_t>(p.slabs));

  const int optin =
      DeviceAttribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(48 * 1024);
  // After the stages: phase 1's quarter sums (kDbias), phase 2's staging
  // tile (kTranspose).
  const int64_t after = std::max<int64_t>(
      kDbias ? 2 * kQuarters * kSlabCols * 4 : 0,
      kTranspose ? StagedFp8Tile<kSlabCols>::kStagingWords * 4 : 0);
  const size_t shared_bytes = static_cast<size_t>(kStages * kSubBytes + after);
  if (static_cast<int64_t>(shared_bytes) + kWarps * 4 > optin) {
    return Invalid(
        "DbiasCurrentCastKernel needs up to 224 KiB of shared memory per "
        "block");
  }
  // At most one block per SM, all resident at once for the grid sync, and
  // none without a sub-tile (every SM's block, rather than the fewest blocks
  // that take the items in as many rounds, which is slower).
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
  const int vec = VectorElements(problem.input_type);
  if (!TreeSumsApply(problem) || problem.batch != 1 ||
      problem.cols % vec != 0 || problem.dbias_split > kMaxDbiasSplit ||
      !Aligned16(buffers.x) || (problem.rowwise && !Aligned16(buffers.row)) ||
      (problem.colwise && !Aligned16(buffers.col))) {
    return false;
  }
  const int64_t node_rows = problem.rows / problem.dbias_split;
  const bool power_of_two = (node_rows & (node_rows - 1)) == 0;
  return power_of_two && node_rows >= kRowsPerThread &&
         problem.rows % kSubRows == 0 &&
         SubTileCount(problem) < kMaxSubTiles &&
         node_rows <= (int64_t{kSubRows} << kMaxLevels);
}

LaunchStatus LaunchDbiasCurrentCast(const Fp8QuantizeProblem& problem,
                                    const Fp8QuantizeBuffers& buffers,
                                    cudaStream_t stream, int sms) {
  return DispatchTypes(problem, [&](auto input, auto format) {
    using In = decltype(input);
    constexpr Fp8Format kFormat = decltype(format)::value;
    return problem.colwise
               ? LaunchOf<In, kFormat, true, true>(problem, buffers, stream,
                                                   sms)
               : LaunchOf<In, kFormat, true, false>(problem, buffers, stream,
                                                    sms);
  });
}

bool RingCurrentTransposeTakes(const Fp8QuantizeProblem& problem, int sms) {
  if (problem.rows % kSubRows != 0) return false;
  // At least two sub-tiles per block: with fewer, the whole-tile kernel's
  // 4 blocks of 256 threads per SM are faster.
  const int64_t sub_tiles = SubTileCount(problem);
  return sub_tiles >= 2 * int64_t{sms} && sub_tiles < kMaxSubTiles;
}

LaunchStatus LaunchRingCurrentTranspose(const Fp8QuantizeProblem& problem,
                                        const Fp8QuantizeBuffers& buffers,
                                        cudaStream_t stream, int sms) {
  if (problem.with_dbias || !problem.colwise) {
    return Invalid(
        "LaunchRingCurrentTranspose takes a transposed copy, no dbias");
  }
  return DispatchTypes(problem, [&](auto input, auto format) {
    return LaunchOf<decltype(input), decltype(format)::value, false, true>(
        problem, buffers, stream, sms);
  });
}

}  // namespace eqx_quant::cuda::fp8
