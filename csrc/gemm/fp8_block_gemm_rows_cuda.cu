// The FP8 block GEMM instance with 1x128 blocks of B's rows (weight gradient), float32 out.

#include "gemm/fp8_block_gemm_kernel_cuda.cuh"

namespace eqx_quant::cuda::fp8_block_gemm {

using RowsKernel = Kernel<1, EpilogueF32, float>;

size_t WorkspaceRows(const Fp8BlockGemmProblem& problem) {
  return RowsKernel::WorkspaceBytes(problem);
}

GemmStatus RunRows(const Fp8BlockGemmProblem& problem, void* workspace,
                   CUstream_st* stream) {
  return RowsKernel::Run(problem, workspace, stream);
}

}  // namespace eqx_quant::cuda::fp8_block_gemm
