// The FP8 block-scaled GEMM of fp8_block_gemm_cuda.h for one B scale
// granularity: CUTLASS's Hopper blockwise-scaled FP8 GEMM (TMA,
// warp-specialized cooperative consumers, the scales applied to the float32
// partial sums of every 128-long K block), 128 x 128 x 128 tiles in clusters
// of two along N, float32 or bfloat16 out.

#ifndef EQX_QUANT_CSRC_GEMM_FP8_BLOCK_GEMM_KERNEL_CUDA_CUH_
#define EQX_QUANT_CSRC_GEMM_FP8_BLOCK_GEMM_KERNEL_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "gemm/cutlass_run_cuda.cuh"
#include "gemm/fp8_block_gemm_cuda.h"

namespace eqx_quant::cuda::fp8_block_gemm {

// A row-major stride (leading dim `ld`, unit step, `batch` between the L
// slices) of CUTLASS's K-major A and B and row-major D.
template <class Stride>
Stride RowStride(int64_t ld, int64_t batch) {
  Stride stride{};
  cute::get<0>(stride) = ld;
  cute::get<2>(stride) = batch;
  return stride;
}

using Element = cutlass::float_e4m3_t;
using LayoutA = cutlass::layout::RowMajor;     // K-contiguous A
using LayoutB = cutlass::layout::ColumnMajor;  // K-contiguous B
using LayoutD = cutlass::layout::RowMajor;
inline constexpr int kAlign = 16;
using Tile = cute::Shape<cute::_128, cute::_128, cute::_128>;
using Cluster = cute::Shape<cute::_1, cute::_2, cute::_1>;

// The epilogues (float32 or bfloat16 out, no C) do not depend on the scales:
// built outside the kernel template (g++ rejects CUTLASS's epilogue builder in
// a dependent context).
template <class ElementD, int kAlignOut>
using EpilogueBuilder = cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignOut,
    ElementD, LayoutD, kAlignOut, cutlass::epilogue::TmaWarpSpecializedCooperative,
    cutlass::epilogue::fusion::LinearCombination<ElementD, float>>;
using EpilogueF32 = EpilogueBuilder<float, 4>::CollectiveOp;
using EpilogueBf16 = EpilogueBuilder<cutlass::bfloat16_t, 8>::CollectiveOp;

template <int kScaleRowsB, class Epilogue, class ElementD>
struct Kernel {
  static constexpr int kEpilogueBytes = static_cast<int>(sizeof(typename Epilogue::SharedStorage));
  // One scale per row of A per 128 K; per kScaleRowsB rows of B per 128 K.
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kScaleRowsB, 128>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element,
      cute::tuple<LayoutA, LayoutSFA>, kAlign, Element, cute::tuple<LayoutB, LayoutSFB>,
      kAlign, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<kEpilogueBytes>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>,
                                                          Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  static typename Gemm::Arguments Arguments(const Fp8BlockGemmProblem& p, void* workspace) {
    (void)workspace;
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
    using StrideA = typename GemmKernel::StrideA;
    using StrideB = typename GemmKernel::StrideB;
    using StrideD = typename GemmKernel::StrideD;
    const auto stride_a = RowStride<StrideA>(k, int64_t{m} * k);
    const auto stride_b = RowStride<StrideB>(k, int64_t{n} * k);
    const auto stride_d = RowStride<StrideD>(n, int64_t{m} * n);
    const auto layout_sfa = ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(m, n, k, 1));
    const auto layout_sfb = ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(m, n, k, 1));
    typename Gemm::Arguments arguments{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {m, n, k, 1},
        {static_cast<const Element*>(p.a), stride_a, static_cast<const Element*>(p.b),
         stride_b, p.a_scale, layout_sfa, p.b_scale, layout_sfb},
        {{}, nullptr, stride_d, static_cast<ElementD*>(p.out), stride_d}};
    arguments.epilogue.thread.alpha = 1.0f;
    arguments.epilogue.thread.beta = 0.0f;
    return arguments;
  }

  static size_t WorkspaceBytes(const Fp8BlockGemmProblem& p) {
    return Gemm::get_workspace_size(Arguments(p, nullptr));
  }

  static GemmStatus Run(const Fp8BlockGemmProblem& p, void* workspace, cudaStream_t stream) {
    return RunCutlass<Gemm>(Arguments(p, workspace), workspace, stream);
  }
};

}  // namespace eqx_quant::cuda::fp8_block_gemm

#endif  // EQX_QUANT_CSRC_GEMM_FP8_BLOCK_GEMM_KERNEL_CUDA_CUH_
