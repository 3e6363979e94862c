// The grouped FP8 block GEMM instance with 128x128 tiles of B's scales, float32 out.

#include "gemm/grouped_fp8_block_gemm_kernel_cuda.cuh"

namespace eqx_quant::cuda::grouped_fp8_block_gemm {

GemmStatus RunTilesF32(const GroupedFp8BlockGemmProblem& problem,
                       DeviceScratch scratch, cudaStream_t stream) {
  return Run<Kernel<128, EpilogueF32, float>>(problem, scratch, stream);
}

}  // namespace eqx_quant::cuda::grouped_fp8_block_gemm
