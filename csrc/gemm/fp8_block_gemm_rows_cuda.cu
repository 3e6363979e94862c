// The FP8 block GEMM instance with 1x128 blocks of B's rows (weight gradient).

#include "gemm/fp8_block_gemm_kernel_cuda.cuh"

namespace eqx_quant::cuda::fp8_block_gemm {

size_t WorkspaceRows(const Fp8BlockGemmProblem& problem) {
  return Kernel<1>::WorkspaceBytes(problem);
}

Fp8BlockGemmStatus RunRows(const Fp8BlockGemmProblem& problem, void* workspace,
                           CUstream_st* stream) {
  return Kernel<1>::Run(problem, workspace, stream);
}

}  // namespace eqx_quant::cuda::fp8_block_gemm
