// CUDA kernels of eqx_quant_mxfp8_quantize (sm_90a): MXFP8 (1x32 and 32x1
// blocks, E8M0 scales) rowwise and/or colwise. The semantics are those of the
// CPU kernel (kernels/mxfp8_quantize_cpu.h), bit for bit.
//
// No CUDA or XLA types appear here: the stream is passed as the driver's
// CUstream_st*, which is what cudaStream_t is.

#ifndef EQX_QUANT_CSRC_KERNELS_MXFP8_QUANTIZE_CUDA_H_
#define EQX_QUANT_CSRC_KERNELS_MXFP8_QUANTIZE_CUDA_H_

#include "common/mxfp8_problem.h"

struct CUstream_st;

namespace eqx_quant::cuda {

// Outcome of the launches: ok, or the launch that failed (`what`) with its
// CUDA error code (cudaError_t as int).
struct Mxfp8LaunchStatus {
  bool ok = true;
  int cuda_error = 0;
  const char* what = "";
};

// Enqueues the whole op on `stream` (one or two kernels, depending on the
// shape and the alignment of the buffers). Allocates nothing and never
// synchronises, so it can be captured into a CUDA graph. Every launch is
// checked.
Mxfp8LaunchStatus Mxfp8Quantize(const Mxfp8QuantizeProblem& problem,
                                const Mxfp8QuantizeBuffers& buffers,
                                CUstream_st* stream);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_KERNELS_MXFP8_QUANTIZE_CUDA_H_
