// The FP8 block GEMM instance with 128x128 tiles of B (forward, input gradient), float32 out.

#include "gemm/fp8_block_gemm_kernel_cuda.cuh"

namespace eqx_quant::cuda::fp8_block_gemm {

using TilesKernel = Kernel<128, EpilogueF32, float>;

size_t WorkspaceTiles(const Fp8BlockGemmProblem& problem) {
  return TilesKernel::WorkspaceBytes(problem);
}

GemmStatus RunTiles(const Fp8BlockGemmProblem& problem, void* workspace,
                    CUstream_st* stream) {
  return TilesKernel::Run(problem, workspace, stream);
}

}  // namespace eqx_quant::cuda::fp8_block_gemm
