// The FP8 block GEMM instance with 128x128 tiles of B (forward, input gradient).

#include "gemm/fp8_block_gemm_kernel_cuda.cuh"

namespace eqx_quant::cuda::fp8_block_gemm {

size_t WorkspaceTiles(const Fp8BlockGemmProblem& problem) {
  return Kernel<128>::WorkspaceBytes(problem);
}

Fp8BlockGemmStatus RunTiles(const Fp8BlockGemmProblem& problem, void* workspace,
                            CUstream_st* stream) {
  return Kernel<128>::Run(problem, workspace, stream);
}

}  // namespace eqx_quant::cuda::fp8_block_gemm
