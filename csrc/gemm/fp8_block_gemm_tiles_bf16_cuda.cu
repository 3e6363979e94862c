// The FP8 block GEMM instance with 128x128 tiles of B (forward, input gradient), bfloat16 out.

#include "gemm/fp8_block_gemm_kernel_cuda.cuh"

namespace eqx_quant::cuda::fp8_block_gemm {

using TilesBf16Kernel = Kernel<128, EpilogueBf16, cutlass::bfloat16_t>;

size_t WorkspaceTilesBf16(const Fp8BlockGemmProblem& problem) {
  return TilesBf16Kernel::WorkspaceBytes(problem);
}

GemmStatus RunTilesBf16(const Fp8BlockGemmProblem& problem, void* workspace,
                        CUstream_st* stream) {
  return TilesBf16Kernel::Run(problem, workspace, stream);
}

}  // namespace eqx_quant::cuda::fp8_block_gemm
