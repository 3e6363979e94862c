// CUDA kernels of eqx_quant_nvfp4_amax and eqx_quant_nvfp4_quantize
// (sm_90a). The semantics are those of the CPU kernels
// (nvfp4/quantize_cpu.h), bit for bit.
//
// No CUDA or XLA types appear here: the stream is passed as the driver's
// CUstream_st*, which is what cudaStream_t is.

#ifndef EQX_QUANT_CSRC_NVFP4_QUANTIZE_CUDA_H_
#define EQX_QUANT_CSRC_NVFP4_QUANTIZE_CUDA_H_

#include "common/nvfp4_problem.h"

struct CUstream_st;

namespace eqx_quant::cuda {

// Outcome of the launches: ok, or what failed (`what`) with its CUDA error
// code (cudaError_t as int; 0 when the problem itself is not supported, e.g.
// a rank above the stochastic-rounding limit).
struct Nvfp4LaunchStatus {
  bool ok = true;
  int cuda_error = 0;
  const char* what = "";
};

// Enqueue the op on `stream`. Nothing is allocated and nothing synchronises,
// so both can be captured into a CUDA graph. Every launch is checked.
Nvfp4LaunchStatus Nvfp4Amax(const Nvfp4AmaxProblem& problem,
                            const Nvfp4AmaxBuffers& buffers,
                            CUstream_st* stream);

Nvfp4LaunchStatus Nvfp4Quantize(const Nvfp4QuantizeProblem& problem,
                                const Nvfp4QuantizeBuffers& buffers,
                                CUstream_st* stream);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_NVFP4_QUANTIZE_CUDA_H_
