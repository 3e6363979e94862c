// The FP8 block GEMM instance with 1x128 blocks of B's rows (weight gradient), bfloat16 out.

#include "gemm/fp8_block_gemm_kernel_cuda.cuh"

namespace eqx_quant::cuda::fp8_block_gemm {

using RowsBf16Kernel = Kernel<1, EpilogueBf16, cutlass::bfloat16_t>;

size_t WorkspaceRowsBf16(const Fp8BlockGemmProblem& problem) {
  return RowsBf16Kernel::WorkspaceBytes(problem);
}

GemmStatus RunRowsBf16(const Fp8BlockGemmProblem& problem, void* workspace,
                       CUstream_st* stream) {
  return RowsBf16Kernel::Run(problem, workspace, stream);
}

}  // namespace eqx_quant::cuda::fp8_block_gemm
