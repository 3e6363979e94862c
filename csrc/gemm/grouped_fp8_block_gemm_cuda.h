// The grouped FP8 block-scaled GEMM (docs/gemm.md, "Grouped FP8 block-scaled
// GEMM"): the MoE expert product of the forward pass and the input gradient
// with DeepSeek-V3's block scales.
//
//   out (M, N) = rows [start_g, start_g + count_g) of a (M, K) times b[g]^T,
//   b (G, N, K), both E4M3 and K-contiguous, float32 sums, rounded once to
//   bfloat16 or float32. a has one float32 scale_inv per row per 128 of K,
//   b[g] one per 128x128 tile (b_tiles) or per row per 128 of K. The scales
//   are applied to the float32 partial sum of each 128-long K block:
//     out[m, n] = sum_j a_scale[m, j] * b_scale[g, n, j] * sum_{k in block j} a[m, k] b[g, n, k]
//   Rows before first_row and past the last group are 0.
//
// The group sizes stay on the device: they are clamped as grouped_quantize
// clamps them (a negative size counts as 0, the groups end at row M), and a
// small kernel turns them into CUTLASS's per-group arguments. Nothing waits
// on the host.
//
// Included by .cu files only; free of XLA types.

#ifndef EQX_QUANT_CSRC_GEMM_GROUPED_FP8_BLOCK_GEMM_CUDA_H_
#define EQX_QUANT_CSRC_GEMM_GROUPED_FP8_BLOCK_GEMM_CUDA_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gemm/grouped_gemm_cuda.h"

namespace eqx_quant::cuda {

struct GroupedFp8BlockGemmProblem {
  int64_t m = 0;  // token rows of a
  int64_t n = 0;
  int64_t k = 0;
  int64_t groups = 0;
  bool b_tiles = true;   // b_scale per 128x128 tile, else per row per 128 of K
  bool out_bf16 = true;  // else float32
  const void* a = nullptr;          // (M, K) E4M3, K-contiguous
  const float* a_scale = nullptr;   // (M, ceil(K/128)), row-major
  const void* b = nullptr;          // (G, N, K) E4M3, K-contiguous
  // (G, ceil(N/128), ceil(K/128)) with b_tiles, else (G, N, ceil(K/128));
  // row-major: the compact scales as the quantizer stores them.
  const float* b_scale = nullptr;
  const int32_t* group_sizes = nullptr;  // (G,) device
  // The row group 0 starts on (device scalar; null: 0). A partition of the op
  // runs one device's rows or groups by it.
  const int32_t* first_row = nullptr;
  void* out = nullptr;  // (M, N), row-major
};

// Enqueues the GEMM on `stream`, its per-call arguments in `scratch`.
GemmStatus GroupedFp8BlockGemm(const GroupedFp8BlockGemmProblem& problem,
                               DeviceScratch scratch, cudaStream_t stream);

namespace grouped_fp8_block_gemm {
// One instance per B scale granularity and output type
// (grouped_fp8_block_gemm_kernel_cuda.cuh), each in its own file.
GemmStatus RunTilesBf16(const GroupedFp8BlockGemmProblem& problem,
                        DeviceScratch scratch, cudaStream_t stream);
GemmStatus RunTilesF32(const GroupedFp8BlockGemmProblem& problem,
                       DeviceScratch scratch, cudaStream_t stream);
GemmStatus RunRowsBf16(const GroupedFp8BlockGemmProblem& problem,
                       DeviceScratch scratch, cudaStream_t stream);
GemmStatus RunRowsF32(const GroupedFp8BlockGemmProblem& problem,
                      DeviceScratch scratch, cudaStream_t stream);
}  // namespace grouped_fp8_block_gemm

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_GEMM_GROUPED_FP8_BLOCK_GEMM_CUDA_H_
