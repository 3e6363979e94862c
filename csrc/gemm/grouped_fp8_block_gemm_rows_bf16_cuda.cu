// The grouped FP8 block GEMM instance with 1x128 blocks of B's rows, bfloat16 out.

#include "gemm/grouped_fp8_block_gemm_kernel_cuda.cuh"

namespace eqx_quant::cuda::grouped_fp8_block_gemm {

GemmStatus RunRowsBf16(const GroupedFp8BlockGemmProblem& problem,
                       DeviceScratch scratch, cudaStream_t stream) {
  return Run<Kernel<1, EpilogueBf16, cutlass::bfloat16_t>>(problem, scratch, stream);
}

}  // namespace eqx_quant::cuda::grouped_fp8_block_gemm
