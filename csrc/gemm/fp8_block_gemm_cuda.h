// The FP8 block-scaled GEMM (docs/block_formats.md, "FP8 block scaling"):
// out (M, N) float32 or bfloat16 = A (M, K) x B (N, K)^T, both E4M3 and K-contiguous, with
// one float32 scale per 1x128 block of A along K and one per 128x128 tile of
// B (the forward product and the input gradient), or per 1x128 block of B's
// rows along K (the weight gradient). The scales are applied to the float32
// partial sums of each 128-long block of K (CUTLASS's Hopper blockwise-scaled
// mainloop), as cuBLASLt's VEC128 / BLK128x128 scale modes do.
//
// No CUDA or XLA types: the stream is the driver's CUstream_st*.

#ifndef EQX_QUANT_CSRC_GEMM_FP8_BLOCK_GEMM_CUDA_H_
#define EQX_QUANT_CSRC_GEMM_FP8_BLOCK_GEMM_CUDA_H_

#include <cstddef>
#include <cstdint>

#include "gemm/gemm_status.h"

struct CUstream_st;

namespace eqx_quant::cuda {

struct Fp8BlockGemmProblem {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool b_tiles = true;       // B: 128x128 tiles, else 1x128 blocks of its rows
  const void* a = nullptr;   // M x K E4M3, K-contiguous
  const float* a_scale = nullptr;  // ceil(K/128) x M, M-contiguous (scale_inv)
  const void* b = nullptr;   // N x K E4M3, K-contiguous
  const float* b_scale = nullptr;  // ceil(K/128) x (ceil(N/128) or N), N-contiguous
  void* out = nullptr;       // M x N, row-major
  bool out_bf16 = false;     // bfloat16 out (N a multiple of 8), else float32
};

// Device memory a call needs besides its buffers (CUTLASS's workspace).
size_t Fp8BlockGemmWorkspaceBytes(const Fp8BlockGemmProblem& problem);

// Enqueues the GEMM on `stream`; `workspace` holds the bytes above.
GemmStatus Fp8BlockGemm(const Fp8BlockGemmProblem& problem, void* workspace,
                        CUstream_st* stream);

namespace fp8_block_gemm {
// One instance per B scale granularity and output type
// (fp8_block_gemm_kernel_cuda.cuh).
size_t WorkspaceTiles(const Fp8BlockGemmProblem& problem);
size_t WorkspaceRows(const Fp8BlockGemmProblem& problem);
size_t WorkspaceTilesBf16(const Fp8BlockGemmProblem& problem);
size_t WorkspaceRowsBf16(const Fp8BlockGemmProblem& problem);
GemmStatus RunTiles(const Fp8BlockGemmProblem& problem, void* workspace,
                    CUstream_st* stream);
GemmStatus RunRows(const Fp8BlockGemmProblem& problem, void* workspace,
                   CUstream_st* stream);
GemmStatus RunTilesBf16(const Fp8BlockGemmProblem& problem, void* workspace,
                        CUstream_st* stream);
GemmStatus RunRowsBf16(const Fp8BlockGemmProblem& problem, void* workspace,
                       CUstream_st* stream);
}  // namespace fp8_block_gemm

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_GEMM_FP8_BLOCK_GEMM_CUDA_H_
