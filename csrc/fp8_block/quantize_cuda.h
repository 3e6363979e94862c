// CUDA kernel of eqx_quant_fp8_block_quantize (sm_90a): FP8 with one float32
// scale per 1x128 block or 128x128 tile, rowwise and/or colwise
// (common/fp8_block_problem.h). The semantics are those of the CPU kernel
// (fp8_block/quantize_cpu.h), bit for bit.
//
// No CUDA or XLA types appear here: the stream is passed as the driver's
// CUstream_st*, which is what cudaStream_t is.

#ifndef EQX_QUANT_CSRC_FP8_BLOCK_QUANTIZE_CUDA_H_
#define EQX_QUANT_CSRC_FP8_BLOCK_QUANTIZE_CUDA_H_

#include "common/fp8_block_problem.h"

struct CUstream_st;

namespace eqx_quant::cuda {

// Outcome of the launch: ok, or the step that failed (`what`) with its CUDA
// error code (cudaError_t as int).
struct Fp8BlockLaunchStatus {
  bool ok = true;
  int cuda_error = 0;
  const char* what = "";
};

// Enqueues one kernel on `stream`: one CTA per 128x128 tile of every
// example. Allocates nothing and never synchronises (graph-capturable).
Fp8BlockLaunchStatus Fp8BlockQuantize(const Fp8BlockQuantizeProblem& problem,
                                      const Fp8BlockQuantizeBuffers& buffers,
                                      CUstream_st* stream);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_FP8_BLOCK_QUANTIZE_CUDA_H_
