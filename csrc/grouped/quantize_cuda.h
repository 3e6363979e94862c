// CUDA kernels (sm_90a) of the grouped (MoE) ops of docs/grouped.md:
// eqx_quant_grouped_fp8_quantize, eqx_quant_grouped_mxfp8_quantize,
// eqx_quant_grouped_nvfp4_quantize, eqx_quant_grouped_fp8_block_quantize and
// eqx_quant_grouped_dbias. The semantics
// are those of the CPU kernels (grouped/quantize_cpu.h), bit for bit.
//
// Each op is one kernel launch (after at most two cudaMemsetAsync zero-fills
// of small outputs: the amax of the FP8 op, the scale buffers of the block
// formats). The group offsets are computed on the device from group_sizes by
// every CTA; nothing is allocated and nothing synchronises with the host, so
// the launches can be captured into a CUDA graph.
//
// No CUDA or XLA types appear here: the stream is passed as the driver's
// CUstream_st*, which is what cudaStream_t is.

#ifndef EQX_QUANT_CSRC_GROUPED_QUANTIZE_CUDA_H_
#define EQX_QUANT_CSRC_GROUPED_QUANTIZE_CUDA_H_

#include "common/grouped_problem.h"

struct CUstream_st;

namespace eqx_quant::cuda {

// Outcome of the enqueued work: ok; or `what` failed with CUDA error
// `cuda_error` (cudaError_t as int); or, with cuda_error == 0, the problem is
// outside what the kernels support (an invalid argument).
struct GroupedLaunchStatus {
  bool ok = true;
  int cuda_error = 0;
  const char* what = "";
};

GroupedLaunchStatus GroupedFp8Quantize(const GroupedFp8QuantizeProblem& problem,
                                       const GroupedFp8QuantizeBuffers& buffers,
                                       CUstream_st* stream);

GroupedLaunchStatus GroupedMxfp8Quantize(
    const GroupedMxfp8QuantizeProblem& problem,
    const GroupedMxfp8QuantizeBuffers& buffers, CUstream_st* stream);

GroupedLaunchStatus GroupedNvfp4Quantize(
    const GroupedNvfp4QuantizeProblem& problem,
    const GroupedNvfp4QuantizeBuffers& buffers, CUstream_st* stream);

// Per group, the dense FP8 block quantize of its rows
// (grouped/fp8_block_cuda.cu): one launch, no zero-fill.
GroupedLaunchStatus GroupedFp8BlockQuantize(
    const GroupedFp8BlockQuantizeProblem& problem,
    const GroupedFp8BlockQuantizeBuffers& buffers, CUstream_st* stream);

GroupedLaunchStatus GroupedDbias(const GroupedDbiasProblem& problem,
                                 const GroupedDbiasBuffers& buffers,
                                 CUstream_st* stream);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_GROUPED_QUANTIZE_CUDA_H_
