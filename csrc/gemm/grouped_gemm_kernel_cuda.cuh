// The grouped GEMM of grouped_gemm_cuda.h for one choice of element types,
// operand layouts and tile: CUTLASS's Hopper pointer-array grouped GEMM
// (TMA loads, warp-specialized consumers, float32 accumulation; FP8 with
// CUTLASS's periodic promotion of the tensor cores' partial sums to float32,
// or its "fast accumulation" where the caller asks), and three small kernels
// of ours:
//   FillGroups   prefix-sums the device group counts and writes each group's
//                problem shape, operand pointers, strides and alpha pointer;
//   Repack       (weight gradient of per-group transposed operands only)
//                copies a group whose rows do not start or end on a 16-byte
//                boundary into a zero-padded scratch copy, because TMA needs
//                16-byte aligned row strides; the zero columns add nothing;
//   ZeroRows     writes the zeros the GEMM does not: rows past the last group
//                (kRows), or the result of a group of no rows (kWgrad).
// Everything runs on the caller's stream; nothing waits on the host.
//
// CUTLASS's names: a problem is (M, N, K) with A (M x K) and B (N x K); a
// "RowMajor" A and a "ColumnMajor" B are K-contiguous (what FP8 tensor cores
// need), a "ColumnMajor" A and "RowMajor" B are M- / N-contiguous.

#ifndef EQX_QUANT_CSRC_GEMM_GROUPED_GEMM_KERNEL_CUDA_CUH_
#define EQX_QUANT_CSRC_GEMM_GROUPED_GEMM_KERNEL_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "cuda/sm_count.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "gemm/cutlass_run_cuda.cuh"
#include "gemm/grouped_gemm_cuda.h"

namespace eqx_quant::cuda::grouped_gemm {

using ProblemShape =
    cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using GroupShape = ProblemShape::UnderlyingProblemShape;

// Tiles: 256 x 128 for groups of many rows (two consumer warpgroups share
// one tile), 128 x 128 (two warpgroups alternate between tiles: one's
// epilogue hides under the other's MMAs) when the groups are short and a
// 256-row tile would be half empty. Clusters of two tiles share the operand
// they have in common (TMA multicast). K per stage: 128 bytes.
template <int kTileM, int kTileN>
struct TileConfig;

template <>
struct TileConfig<256, 128> {
  using Cluster = cute::Shape<cute::_1, cute::_2, cute::_1>;
  static constexpr bool kCooperative = true;
};

template <>
struct TileConfig<128, 128> {
  using Cluster = cute::Shape<cute::_1, cute::_2, cute::_1>;
  static constexpr bool kCooperative = false;
};

// The mainloop schedule: cooperative or ping-pong, FP8 with promoted or fast
// accumulation (fast: FP8 operands only).
template <bool kCooperative, bool kFastAccum>
struct Schedule;
template <>
struct Schedule<true, false> {
  using Kernel = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
template <>
struct Schedule<false, false> {
  using Kernel = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};
template <>
struct Schedule<true, true> {
  using Kernel =
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
template <>
struct Schedule<false, true> {
  using Kernel =
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};

template <class ElementA_, class LayoutA_, class ElementB_, class LayoutB_,
          class ElementD_, int kTileM, int kTileN, bool kFastAccum>
struct Kernel {
  using ElementA = ElementA_;
  using ElementB = ElementB_;
  using ElementD = ElementD_;
  using LayoutA = LayoutA_;
  using LayoutB = LayoutB_;
  using LayoutD = cutlass::layout::RowMajor;
  static_assert(!kFastAccum || sizeof(ElementA) == 1,
                "fast accumulation is an FP8 schedule");
  static constexpr int kAlignA = 16 / sizeof(ElementA);
  static constexpr int kAlignB = 16 / sizeof(ElementB);
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  using Config = TileConfig<kTileM, kTileN>;
  using Tile = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>,
                           cute::Int<128 / sizeof(ElementA)>>;
  using Sched = Schedule<Config::kCooperative, kFastAccum>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Tile, typename Config::Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void,
      LayoutD*, kAlignD, ElementD, LayoutD*, kAlignD,
      typename Sched::Epilogue,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float>>::
      CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA*,
      kAlignA, ElementB, LayoutB*, kAlignB, float, Tile,
      typename Config::Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      typename Sched::Kernel>::CollectiveOp;

  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using StrideA = typename GemmKernel::InternalStrideA;
  using StrideB = typename GemmKernel::InternalStrideB;
  using StrideD = typename GemmKernel::InternalStrideD;
};

// A packed 2-D stride whose one dynamic entry (the leading dim) is `ld`.
template <class Stride>
__device__ Stride LeadingStride(int64_t ld) {
  Stride stride{};
  if constexpr (cute::is_static<
                    std::decay_t<decltype(cute::get<0>(stride))>>::value) {
    cute::get<1>(stride) = ld;
  } else {
    cute::get<0>(stride) = ld;
  }
  return stride;
}

// The per-group arguments of one call, in the caller's scratch.
template <class K>
struct GroupArrays {
  GroupShape* shapes;
  const typename K::ElementA** a;
  const typename K::ElementB** b;
  typename K::ElementD** d;
  typename K::StrideA* stride_a;
  typename K::StrideB* stride_b;
  typename K::StrideD* stride_d;
  const float** alpha;
  int64_t* start;         // first row of each group
  int64_t* packed_start;  // first column of its repacked copy (Repack)
  int64_t* rows;          // [first row, end row) of the groups' rows
};

constexpr int kFillThreads = 1024;

__host__ __device__ inline int64_t RoundUp(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

// Whether a group of per-group transposed operands is copied by Repack: its
// columns start or end off a 16-byte boundary.
__device__ inline bool NeedsRepack(int64_t start, int64_t count, int align) {
  return count > 0 && (start % align != 0 || count % align != 0);
}

template <class K>
__global__ void __launch_bounds__(kFillThreads)
    FillGroups(GroupedGemmProblem p, GroupArrays<K> g,
               typename K::ElementA* repack_a, typename K::ElementB* repack_b) {
  using Scan = cub::BlockScan<long long, kFillThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  constexpr int kAlign = K::kAlignA < K::kAlignB ? K::kAlignA : K::kAlignB;
  const int64_t groups = p.groups;
  const int64_t per_thread = (groups + kFillThreads - 1) / kFillThreads;
  const int64_t first = threadIdx.x * per_thread;
  const int64_t last = first + per_thread < groups ? first + per_thread : groups;
  long long rows = 0, packed = 0;
  for (int64_t i = first; i < last; ++i) {
    rows += p.counts[i];
    packed += RoundUp(p.counts[i], kAlign);
  }
  long long row_base = 0, packed_base = 0, total = 0, unused = 0;
  Scan(scan_storage).ExclusiveSum(rows, row_base, total);
  __syncthreads();
  Scan(scan_storage).ExclusiveSum(packed, packed_base, unused);
  const int64_t first_row = p.first_row != nullptr ? *p.first_row : 0;
  if (threadIdx.x == 0) {
    g.rows[0] = first_row;
    g.rows[1] = first_row + total;
  }

  const auto* a = static_cast<const typename K::ElementA*>(p.a);
  const auto* b = static_cast<const typename K::ElementB*>(p.b);
  auto* d = static_cast<typename K::ElementD*>(p.out);
  const int64_t k = p.k, n = p.n;
  int64_t start = first_row + row_base, packed_start = packed_base;
  for (int64_t i = first; i < last; ++i) {
    const int64_t count = p.counts[i];
    g.start[i] = start;
    g.packed_start[i] = packed_start;
    g.alpha[i] = p.alpha != nullptr ? p.alpha + i : nullptr;
    if (p.kind == GroupedGemmKind::kRows) {
      g.shapes[i] = GroupShape(static_cast<int>(count), static_cast<int>(n),
                               static_cast<int>(k));
      g.a[i] = a + start * k;
      g.b[i] = b + i * k * n;
      g.d[i] = d + start * n;
      g.stride_a[i] = LeadingStride<typename K::StrideA>(k);
      g.stride_b[i] =
          LeadingStride<typename K::StrideB>(p.transposed ? k : n);
    } else {
      // (K x count) times (count x N) into group i's (K, N) slice; a group of
      // no rows is left to ZeroRows.
      int64_t width = count;
      if (p.transposed && NeedsRepack(start, count, kAlign)) {
        width = RoundUp(count, kAlign);
        g.a[i] = repack_a + packed_start * k;
        g.b[i] = repack_b + packed_start * n;
      } else {
        // Group i's rows: (count, K) at start * K, or its transposed
        // (K, count) block at the same offset.
        g.a[i] = a + start * k;
        g.b[i] = b + start * n;
      }
      g.shapes[i] = count > 0 ? GroupShape(static_cast<int>(k),
                                           static_cast<int>(n),
                                           static_cast<int>(width))
                              : GroupShape(0, 0, 0);
      g.d[i] = d + i * k * n;
      g.stride_a[i] =
          LeadingStride<typename K::StrideA>(p.transposed ? width : k);
      g.stride_b[i] =
          LeadingStride<typename K::StrideB>(p.transposed ? width : n);
    }
    g.stride_d[i] = LeadingStride<typename K::StrideD>(n);
    start += count;
    packed_start += RoundUp(count, kAlign);
  }
}

// One operand's (lines, count) block of group blockIdx.x copied to its
// zero-padded (lines, RoundUp(count, align)) copy, for groups FillGroups sent
// to the copy.
template <class Element, int kAlign>
__device__ void RepackOperand(const Element* src, Element* dst, int64_t lines,
                              int64_t start, int64_t packed_start,
                              int64_t count) {
  const int64_t width = RoundUp(count, kAlign);
  const Element* from = src + start * lines;
  Element* to = dst + packed_start * lines;
  for (int64_t line = blockIdx.y; line < lines; line += gridDim.y) {
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      to[line * width + j] = j < count ? from[line * count + j] : Element(0);
    }
  }
}

template <class K>
__global__ void Repack(GroupedGemmProblem p, GroupArrays<K> g,
                       typename K::ElementA* repack_a,
                       typename K::ElementB* repack_b) {
  constexpr int kAlign = K::kAlignA < K::kAlignB ? K::kAlignA : K::kAlignB;
  const int64_t i = blockIdx.x;
  const int64_t count = p.counts[i];
  if (!NeedsRepack(g.start[i], count, kAlign)) return;
  RepackOperand<typename K::ElementA, kAlign>(
      static_cast<const typename K::ElementA*>(p.a), repack_a, p.k, g.start[i],
      g.packed_start[i], count);
  RepackOperand<typename K::ElementB, kAlign>(
      static_cast<const typename K::ElementB*>(p.b), repack_b, p.n, g.start[i],
      g.packed_start[i], count);
}

// kRows: zeros on the rows of out before and after the groups' rows
// (blockIdx.y 0 and 1); kWgrad: zeros on the (K, N) slices of the groups of
// no rows. 16-byte stores (rows are multiples of 16 bytes).
// A template only so that each instance file may define it (one kernel per
// file would otherwise be defined twelve times).
template <int kUnused = 0>
__global__ void ZeroRows(GroupedGemmProblem p, const int64_t* rows,
                         int64_t row_bytes) {
  const uint4 zero = make_uint4(0, 0, 0, 0);
  auto* out = static_cast<uint4*>(p.out);
  const int64_t per_row = row_bytes / 16;
  int64_t begin, end;
  if (p.kind == GroupedGemmKind::kRows) {
    begin = blockIdx.y == 0 ? 0 : rows[1] * per_row;
    end = blockIdx.y == 0 ? rows[0] * per_row : p.m * per_row;
    for (int64_t i = begin + blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
         i < end; i += int64_t(gridDim.x) * blockDim.x) {
      out[i] = zero;
    }
    return;
  }
  // kWgrad: block (x, y) covers part x of group y's K rows.
  for (int64_t group = blockIdx.y; group < p.groups; group += gridDim.y) {
    if (p.counts[group] != 0) continue;
    begin = group * p.k * per_row;
    end = begin + p.k * per_row;
    for (int64_t i = begin + blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
         i < end; i += int64_t(gridDim.x) * blockDim.x) {
      out[i] = zero;
    }
  }
}

inline size_t Take(size_t& offset, size_t bytes) {
  const size_t at = offset;
  offset = (offset + bytes + 255) / 256 * 256;
  return at;
}

template <class K>
GemmStatus Run(const GroupedGemmProblem& p, DeviceScratch scratch,
               cudaStream_t stream) {
  using Gemm = typename K::Gemm;
  constexpr int kAlign = K::kAlignA < K::kAlignB ? K::kAlignA : K::kAlignB;
  const size_t groups = static_cast<size_t>(p.groups);
  size_t bytes = 0;
  const size_t at_shapes = Take(bytes, groups * sizeof(GroupShape));
  const size_t at_a = Take(bytes, groups * sizeof(void*));
  const size_t at_b = Take(bytes, groups * sizeof(void*));
  const size_t at_d = Take(bytes, groups * sizeof(void*));
  const size_t at_sa = Take(bytes, groups * sizeof(typename K::StrideA));
  const size_t at_sb = Take(bytes, groups * sizeof(typename K::StrideB));
  const size_t at_sd = Take(bytes, groups * sizeof(typename K::StrideD));
  const size_t at_alpha = Take(bytes, groups * sizeof(float*));
  const size_t at_start = Take(bytes, groups * sizeof(int64_t));
  const size_t at_packed = Take(bytes, groups * sizeof(int64_t));
  const size_t at_rows = Take(bytes, 2 * sizeof(int64_t));
  const bool repack = p.kind == GroupedGemmKind::kWgrad && p.transposed;
  const size_t packed_cols =
      repack ? static_cast<size_t>(p.m) + (kAlign - 1) * groups : 0;
  const size_t at_repack_a = Take(
      bytes, packed_cols * static_cast<size_t>(p.k) * sizeof(typename K::ElementA));
  const size_t at_repack_b = Take(
      bytes, packed_cols * static_cast<size_t>(p.n) * sizeof(typename K::ElementB));
  auto* base = static_cast<char*>(scratch.allocate(scratch.context, bytes));
  if (base == nullptr) return {false, 0, "scratch allocation of the group arguments"};

  GroupArrays<K> g{
      reinterpret_cast<GroupShape*>(base + at_shapes),
      reinterpret_cast<const typename K::ElementA**>(base + at_a),
      reinterpret_cast<const typename K::ElementB**>(base + at_b),
      reinterpret_cast<typename K::ElementD**>(base + at_d),
      reinterpret_cast<typename K::StrideA*>(base + at_sa),
      reinterpret_cast<typename K::StrideB*>(base + at_sb),
      reinterpret_cast<typename K::StrideD*>(base + at_sd),
      reinterpret_cast<const float**>(base + at_alpha),
      reinterpret_cast<int64_t*>(base + at_start),
      reinterpret_cast<int64_t*>(base + at_packed),
      reinterpret_cast<int64_t*>(base + at_rows)};
  auto* repack_a = reinterpret_cast<typename K::ElementA*>(base + at_repack_a);
  auto* repack_b = reinterpret_cast<typename K::ElementB*>(base + at_repack_b);

  FillGroups<K><<<1, kFillThreads, 0, stream>>>(p, g, repack_a, repack_b);
  if (repack) {
    Repack<K><<<dim3(static_cast<unsigned>(groups), 16), 256, 0, stream>>>(
        p, g, repack_a, repack_b);
  }
  const int64_t row_bytes =
      p.n * static_cast<int64_t>(sizeof(typename K::ElementD));
  ZeroRows<<<dim3(64, p.kind == GroupedGemmKind::kRows
                          ? 2u
                          : static_cast<unsigned>(groups < 1024 ? groups : 1024)),
             256, 0, stream>>>(p, g.rows, row_bytes);
  if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
    return {false, static_cast<int>(error), "the group argument kernels"};
  }

  typename Gemm::Arguments args;
  decltype(args.epilogue.thread) fusion;
  fusion.alpha = 1.0f;
  fusion.beta = 0.0f;
  fusion.alpha_ptr = nullptr;
  fusion.beta_ptr = nullptr;
  fusion.alpha_ptr_array = p.alpha != nullptr ? g.alpha : nullptr;
  fusion.beta_ptr_array = nullptr;
  fusion.dAlpha = {cute::_0{}, cute::_0{}, p.alpha != nullptr ? 1 : 0};
  fusion.dBeta = {cute::_0{}, cute::_0{}, 0};
  cutlass::KernelHardwareInfo hw_info;
  cudaGetDevice(&hw_info.device_id);
  hw_info.sm_count = SmCount();
  args = typename Gemm::Arguments{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {static_cast<int>(groups), g.shapes, nullptr},
      {g.a, g.stride_a, g.b, g.stride_b},
      {fusion, nullptr, nullptr, g.d, g.stride_d},
      hw_info};

  return RunCutlass<Gemm>(args, scratch, stream);
}

}  // namespace eqx_quant::cuda::grouped_gemm

#endif  // EQX_QUANT_CSRC_GEMM_GROUPED_GEMM_KERNEL_CUDA_CUH_
