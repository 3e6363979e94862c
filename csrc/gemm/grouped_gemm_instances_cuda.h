// The grouped GEMM kernels that are built: element types of A and B, their
// layouts (CUTLASS's names, grouped_gemm_kernel_cuda.cuh) and the output
// type. FP8 operands are K-contiguous on both sides (what FP8 tensor cores
// read); bfloat16 ones may be M- or N-contiguous too, which the forward pass
// of (K, N) weights and the weight gradient of (M, K) / (M, N) rows are.
// csrc/CMakeLists.txt compiles one file per line of the same list
// (gemm/grouped_gemm_instance_cuda.cu.in), so that they build in parallel.

#ifndef EQX_QUANT_CSRC_GEMM_GROUPED_GEMM_INSTANCES_CUDA_H_
#define EQX_QUANT_CSRC_GEMM_GROUPED_GEMM_INSTANCES_CUDA_H_

#include <cuda_runtime_api.h>

#include "gemm/grouped_gemm_cuda.h"

// X(A, B, layouts, out, tile rows, tile columns, fast accumulation 0/1).
// Every combination has 128 x 128 tiles with promoted sums; the bfloat16
// forward pass also 256-row tiles, for groups of many rows, and the E4M3
// forward pass 128 x 128 tiles with fast accumulation (wider FP8 tiles were
// no faster on the H200, docs/gemm.md).
#define EQX_QUANT_GROUPED_GEMM_INSTANCES(X)  \
  X(E4m3, E4m3, RowCol, Bf16, 128, 128, 0)   \
  X(E4m3, E4m3, RowCol, F32, 128, 128, 0)    \
  X(E4m3, E5m2, RowCol, Bf16, 128, 128, 0)   \
  X(E4m3, E5m2, RowCol, F32, 128, 128, 0)    \
  X(E5m2, E4m3, RowCol, Bf16, 128, 128, 0)   \
  X(E5m2, E4m3, RowCol, F32, 128, 128, 0)    \
  X(Bf16, Bf16, RowCol, Bf16, 128, 128, 0)   \
  X(Bf16, Bf16, RowCol, F32, 128, 128, 0)    \
  X(Bf16, Bf16, RowRow, Bf16, 128, 128, 0)   \
  X(Bf16, Bf16, RowRow, F32, 128, 128, 0)    \
  X(Bf16, Bf16, ColRow, Bf16, 128, 128, 0)   \
  X(Bf16, Bf16, ColRow, F32, 128, 128, 0)    \
  X(Bf16, Bf16, RowRow, Bf16, 256, 128, 0)   \
  X(E4m3, E4m3, RowCol, Bf16, 128, 128, 1)

namespace eqx_quant::cuda::grouped_gemm {

#define EQX_QUANT_DECLARE_GROUPED_GEMM(A, B, L, D, TM, TN, F)   \
  GemmStatus Run##A##B##L##D##_##TM##x##TN##_##F(                 \
      const GroupedGemmProblem& problem, DeviceScratch scratch,    \
      cudaStream_t stream);
EQX_QUANT_GROUPED_GEMM_INSTANCES(EQX_QUANT_DECLARE_GROUPED_GEMM)
#undef EQX_QUANT_DECLARE_GROUPED_GEMM

}  // namespace eqx_quant::cuda::grouped_gemm

#endif  // EQX_QUANT_CSRC_GEMM_GROUPED_GEMM_INSTANCES_CUDA_H_
