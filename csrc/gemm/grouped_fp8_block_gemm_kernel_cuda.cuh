// The grouped FP8 block-scaled GEMM of grouped_fp8_block_gemm_cuda.h for one B
// scale granularity and output type: CUTLASS's Hopper pointer-array grouped
// GEMM with blockwise scaling (TMA loads of A and B, the scales copied beside
// them by the producer warpgroup's auxiliary warp, two cooperative consumer
// warpgroups on each 128 x 128 output tile, the scales applied to the float32
// partial sums of every 128-long K block), and three small kernels of ours:
//   FillGroups   clamps and prefix-sums the device group sizes and writes each
//                group's problem shape, operand and scale pointers, strides
//                and scale layouts;
//   PackScales   copies each group's scales into the layout CUTLASS reads: a
//                group's A scales as one (ceil(K/128), count_g) M-contiguous
//                block, B's as (ceil(K/128), ceil(N/128) or N) N-contiguous;
//   ZeroRows     writes zeros on the rows of out that no group covers.
// Everything runs on the caller's stream; nothing waits on the host.
//
// CUTLASS's names: a problem is (M, N, K) with A (M x K) and B (N x K); a
// "RowMajor" A and a "ColumnMajor" B are K-contiguous.

#ifndef EQX_QUANT_CSRC_GEMM_GROUPED_FP8_BLOCK_GEMM_KERNEL_CUDA_CUH_
#define EQX_QUANT_CSRC_GEMM_GROUPED_FP8_BLOCK_GEMM_KERNEL_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "cuda/sm_count.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "gemm/cutlass_run_cuda.cuh"
#include "gemm/grouped_fp8_block_gemm_cuda.h"

namespace eqx_quant::cuda::grouped_fp8_block_gemm {

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using GroupShape = ProblemShape::UnderlyingProblemShape;

using Element = cutlass::float_e4m3_t;
using LayoutA = cutlass::layout::RowMajor;     // K-contiguous A
using LayoutB = cutlass::layout::ColumnMajor;  // K-contiguous B
using LayoutD = cutlass::layout::RowMajor;
inline constexpr int kAlign = 16;  // E4M3 elements per 16-byte TMA unit
inline constexpr int kBlock = 128;  // the scales' K block (and B's tile rows)
// 128 x 128 output tiles with 128 of K per stage (one scale block), in
// clusters of two along N that share A's tile (TMA multicast): CUTLASS's
// blockwise mainloop needs whole scale blocks per stage, and the cooperative
// schedule splits each tile's rows between two warpgroups, so the second
// float32 accumulator that the scale promotion needs still fits in registers.
using Tile = cute::Shape<cute::_128, cute::_128, cute::_128>;
using Cluster = cute::Shape<cute::_1, cute::_2, cute::_1>;

// The epilogues (no C, bfloat16 or float32 D per group) do not depend on the
// scales: built outside the kernel template, as for the dense FP8 block GEMM.
template <class ElementD>
using EpilogueBuilder = cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*,
    static_cast<int>(16 / sizeof(ElementD)), ElementD, LayoutD*,
    static_cast<int>(16 / sizeof(ElementD)),
    cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
    cutlass::epilogue::fusion::LinearCombination<ElementD, float>>;
using EpilogueBf16 = EpilogueBuilder<cutlass::bfloat16_t>::CollectiveOp;
using EpilogueF32 = EpilogueBuilder<float>::CollectiveOp;

template <int kScaleRowsB, class Epilogue, class ElementD_>
struct Kernel {
  using ElementD = ElementD_;
  static constexpr int kBRowsPerScale = kScaleRowsB;
  // One scale per row of A per 128 of K; one per kScaleRowsB rows of B.
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kScaleRowsB, kBlock>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element,
      cute::tuple<LayoutA*, LayoutSFA*>, kAlign, Element, cute::tuple<LayoutB*, LayoutSFB*>,
      kAlign, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using StrideA = typename GemmKernel::InternalStrideA;
  using StrideB = typename GemmKernel::InternalStrideB;
  using StrideD = typename GemmKernel::InternalStrideD;
};

// A K- or N-contiguous 2-D stride (CUTLASS's (ld, 1, 0)) with leading dim `ld`.
template <class Stride>
__device__ Stride LeadingStride(int64_t ld) {
  static_assert(cute::is_static<std::decay_t<decltype(cute::get<1>(Stride{}))>>::value,
                "a unit-stride second mode");
  Stride stride{};
  cute::get<0>(stride) = ld;
  return stride;
}

__host__ __device__ inline int64_t CeilDiv(int64_t x, int64_t d) { return (x + d - 1) / d; }

// B's scale columns per K block: one per 128 rows (tiles) or per row.
template <class K>
__host__ __device__ inline int64_t BScaleCols(int64_t n) {
  return CeilDiv(n, K::kBRowsPerScale);
}

// The per-group arguments of one call, in the caller's scratch.
template <class K>
struct GroupArrays {
  GroupShape* shapes;
  const Element** a;
  const Element** b;
  typename K::ElementD** d;
  typename K::StrideA* stride_a;
  typename K::StrideB* stride_b;
  typename K::StrideD* stride_d;
  const float** a_scale;
  const float** b_scale;
  typename K::LayoutSFA* layout_a_scale;
  typename K::LayoutSFB* layout_b_scale;
  int64_t* start;   // each group's first row (clamped)
  int64_t* count;   // each group's rows (clamped)
  int64_t* rows;    // [first row, end row) of the groups' rows
  float* packed_a_scale;  // M * ceil(K/128): group g's block at ceil(K/128) * start_g
  float* packed_b_scale;  // G * ceil(K/128) * BScaleCols
};

// 256 threads: one group each up to 256 groups, and room for the registers that
// the per-group arguments take (1024 threads would cap them at 64 and spill).
constexpr int kFillThreads = 256;

template <class K>
__global__ void __launch_bounds__(kFillThreads)
    FillGroups(GroupedFp8BlockGemmProblem p, GroupArrays<K> g) {
  using Scan = cub::BlockScan<long long, kFillThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const int64_t groups = p.groups;
  const int64_t per_thread = CeilDiv(groups, kFillThreads);
  const int64_t first = threadIdx.x * per_thread;
  const int64_t last = first + per_thread < groups ? first + per_thread : groups;
  long long rows = 0;
  for (int64_t i = first; i < last; ++i) {
    rows += p.group_sizes[i] > 0 ? p.group_sizes[i] : 0;
  }
  long long before = 0, total = 0;
  Scan(scan_storage).ExclusiveSum(rows, before, total);
  const int64_t first_row = p.first_row != nullptr ? *p.first_row : 0;
  // Clamped as grouped_quantize clamps: the groups end at row M.
  const auto clamp = [&](int64_t row) { return row < p.m ? row : p.m; };
  if (threadIdx.x == 0) {
    g.rows[0] = clamp(first_row);
    g.rows[1] = clamp(first_row + total);
  }

  const auto* a = static_cast<const Element*>(p.a);
  const auto* b = static_cast<const Element*>(p.b);
  auto* d = static_cast<typename K::ElementD*>(p.out);
  const int64_t k = p.k, n = p.n, kb = CeilDiv(k, kBlock);
  const int64_t b_scales = kb * BScaleCols<K>(n);
  int64_t end = first_row + before;
  for (int64_t i = first; i < last; ++i) {
    const int64_t start = clamp(end);
    end += p.group_sizes[i] > 0 ? p.group_sizes[i] : 0;
    const int64_t count = clamp(end) - start;
    g.start[i] = start;
    g.count[i] = count;
    g.shapes[i] = GroupShape(static_cast<int>(count), static_cast<int>(n), static_cast<int>(k));
    g.a[i] = a + start * k;
    g.b[i] = b + i * n * k;
    g.d[i] = d + start * n;
    g.stride_a[i] = LeadingStride<typename K::StrideA>(k);
    g.stride_b[i] = LeadingStride<typename K::StrideB>(k);
    g.stride_d[i] = LeadingStride<typename K::StrideD>(n);
    g.a_scale[i] = g.packed_a_scale + kb * start;
    g.b_scale[i] = g.packed_b_scale + i * b_scales;
    // The compact layouts CUTLASS derives from each group's shape (its
    // mainloop rebuilds them per group; filled so that the arguments agree).
    const auto shape = cute::make_shape(static_cast<int>(count), static_cast<int>(n),
                                        static_cast<int>(k), 1);
    g.layout_a_scale[i] = K::ScaleConfig::tile_atom_to_shape_SFA(shape);
    g.layout_b_scale[i] = K::ScaleConfig::tile_atom_to_shape_SFB(shape);
  }
}

// Group blockIdx.y's scales in CUTLASS's layouts (see the file comment): the
// writes are contiguous, the reads of the row-major scales strided by their
// (small) row length. Both scale matrices are a few MB at most.
template <class K>
__global__ void PackScales(GroupedFp8BlockGemmProblem p, GroupArrays<K> g) {
  const int64_t kb = CeilDiv(p.k, kBlock);
  const int64_t cols = BScaleCols<K>(p.n);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.y; i < p.groups; i += gridDim.y) {
    const int64_t start = g.start[i], count = g.count[i];
    float* a_to = g.packed_a_scale + kb * start;
    const float* a_from = p.a_scale + start * kb;
    for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < kb * count;
         e += step) {
      const int64_t block = e / count, row = e - block * count;
      a_to[e] = a_from[row * kb + block];
    }
    float* b_to = g.packed_b_scale + i * kb * cols;
    const float* b_from = p.b_scale + i * cols * kb;
    for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < kb * cols; e += step) {
      const int64_t block = e / cols, col = e - block * cols;
      b_to[e] = b_from[col * kb + block];
    }
  }
}

// Zeros on the rows of out before the first group (blockIdx.y 0) and after
// the last (blockIdx.y 1), in 16-byte stores (rows are multiples of 16 bytes).
template <class K>
__global__ void ZeroRows(GroupedFp8BlockGemmProblem p, const int64_t* rows) {
  const uint4 zero = make_uint4(0, 0, 0, 0);
  auto* out = static_cast<uint4*>(p.out);
  const int64_t per_row =
      p.n * static_cast<int64_t>(sizeof(typename K::ElementD)) / static_cast<int64_t>(16);
  const int64_t begin = blockIdx.y == 0 ? 0 : rows[1] * per_row;
  const int64_t end = blockIdx.y == 0 ? rows[0] * per_row : p.m * per_row;
  for (int64_t i = begin + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < end;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = zero;
  }
}

inline size_t Take(size_t& offset, size_t bytes) {
  const size_t at = offset;
  offset = (offset + bytes + 255) / 256 * 256;
  return at;
}

template <class K>
GemmStatus Run(const GroupedFp8BlockGemmProblem& p, DeviceScratch scratch,
               cudaStream_t stream) {
  using Gemm = typename K::Gemm;
  const size_t groups = static_cast<size_t>(p.groups);
  const size_t kb = static_cast<size_t>(CeilDiv(p.k, kBlock));
  const size_t b_scales = kb * static_cast<size_t>(BScaleCols<K>(p.n));
  size_t bytes = 0;
  const size_t at_shapes = Take(bytes, groups * sizeof(GroupShape));
  const size_t at_a = Take(bytes, groups * sizeof(void*));
  const size_t at_b = Take(bytes, groups * sizeof(void*));
  const size_t at_d = Take(bytes, groups * sizeof(void*));
  const size_t at_sa = Take(bytes, groups * sizeof(typename K::StrideA));
  const size_t at_sb = Take(bytes, groups * sizeof(typename K::StrideB));
  const size_t at_sd = Take(bytes, groups * sizeof(typename K::StrideD));
  const size_t at_a_scale = Take(bytes, groups * sizeof(float*));
  const size_t at_b_scale = Take(bytes, groups * sizeof(float*));
  const size_t at_la = Take(bytes, groups * sizeof(typename K::LayoutSFA));
  const size_t at_lb = Take(bytes, groups * sizeof(typename K::LayoutSFB));
  const size_t at_start = Take(bytes, groups * sizeof(int64_t));
  const size_t at_count = Take(bytes, groups * sizeof(int64_t));
  const size_t at_rows = Take(bytes, 2 * sizeof(int64_t));
  const size_t at_packed_a = Take(bytes, static_cast<size_t>(p.m) * kb * sizeof(float));
  const size_t at_packed_b = Take(bytes, groups * b_scales * sizeof(float));
  auto* base = static_cast<char*>(scratch.allocate(scratch.context, bytes));
  if (base == nullptr) return {false, 0, "scratch allocation of the group arguments"};

  GroupArrays<K> g{reinterpret_cast<GroupShape*>(base + at_shapes),
                   reinterpret_cast<const Element**>(base + at_a),
                   reinterpret_cast<const Element**>(base + at_b),
                   reinterpret_cast<typename K::ElementD**>(base + at_d),
                   reinterpret_cast<typename K::StrideA*>(base + at_sa),
                   reinterpret_cast<typename K::StrideB*>(base + at_sb),
                   reinterpret_cast<typename K::StrideD*>(base + at_sd),
                   reinterpret_cast<const float**>(base + at_a_scale),
                   reinterpret_cast<const float**>(base + at_b_scale),
                   reinterpret_cast<typename K::LayoutSFA*>(base + at_la),
                   reinterpret_cast<typename K::LayoutSFB*>(base + at_lb),
                   reinterpret_cast<int64_t*>(base + at_start),
                   reinterpret_cast<int64_t*>(base + at_count),
                   reinterpret_cast<int64_t*>(base + at_rows),
                   reinterpret_cast<float*>(base + at_packed_a),
                   reinterpret_cast<float*>(base + at_packed_b)};

  FillGroups<K><<<1, kFillThreads, 0, stream>>>(p, g);
  const unsigned scale_groups = static_cast<unsigned>(groups < 1024 ? groups : 1024);
  PackScales<K><<<dim3(32, scale_groups), 256, 0, stream>>>(p, g);
  ZeroRows<K><<<dim3(64, 2), 256, 0, stream>>>(p, g.rows);
  if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
    return {false, static_cast<int>(error), "the group argument kernels"};
  }

  typename Gemm::Arguments args;
  decltype(args.epilogue.thread) fusion;
  fusion.alpha = 1.0f;
  fusion.beta = 0.0f;
  fusion.alpha_ptr = nullptr;
  fusion.beta_ptr = nullptr;
  fusion.alpha_ptr_array = nullptr;
  fusion.beta_ptr_array = nullptr;
  cutlass::KernelHardwareInfo hw_info;
  cudaGetDevice(&hw_info.device_id);
  hw_info.sm_count = SmCount();
  args = typename Gemm::Arguments{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {static_cast<int>(groups), g.shapes, nullptr},
      {g.a, g.stride_a, g.b, g.stride_b, g.a_scale, g.layout_a_scale, g.b_scale,
       g.layout_b_scale},
      {fusion, nullptr, nullptr, g.d, g.stride_d},
      hw_info};

  return RunCutlass<Gemm>(args, scratch, stream);
}

}  // namespace eqx_quant::cuda::grouped_fp8_block_gemm

#endif  // EQX_QUANT_CSRC_GEMM_GROUPED_FP8_BLOCK_GEMM_KERNEL_CUDA_CUH_
