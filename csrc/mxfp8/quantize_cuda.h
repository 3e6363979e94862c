// CUDA kernels of eqx_quant_mxfp8_quantize (sm_90a): MXFP8 (1x32 and 32x1
// blocks, E8M0 scales) rowwise and/or colwise. The semantics are those of the
// CPU kernel (mxfp8/quantize_cpu.h), bit for bit.
//
// No CUDA or XLA types appear here: the stream is passed as the driver's
// CUstream_st*, which is what cudaStream_t is.

#ifndef EQX_QUANT_CSRC_MXFP8_QUANTIZE_CUDA_H_
#define EQX_QUANT_CSRC_MXFP8_QUANTIZE_CUDA_H_

#include "common/mxfp8_problem.h"

struct CUstream_st;

namespace eqx_quant::cuda {

// Outcome of the launches: ok, or the launch that failed (`what`) with its
// CUDA error code (cudaError_t as int).
struct Mxfp8LaunchStatus {
  bool ok = true;
  int cuda_error = 0;
  const char* what = "";
  bool tile_sums_written = false;  // see Mxfp8Quantize's tile_sums
};

// Enqueues the whole op on `stream` (one or two kernels, depending on the
// shape and the alignment of the buffers). Allocates nothing and never
// synchronises, so it can be captured into a CUDA graph. Every launch is
// checked.
//
// tile_sums (optional): with rowwise + colwise blocks run by the tile kernel
// and K % 32 == 0, or rowwise only when Mxfp8RowTileSumsTake, that kernel
// also writes each column's sum over each 32-row block of K (float32, the
// perfect pairwise tree, NaN canonical) to tile_sums[(a * K / 32 + kb) * W +
// c] (W = C * L) and the status says tile_sums_written; otherwise tile_sums
// is not touched.
Mxfp8LaunchStatus Mxfp8Quantize(const Mxfp8QuantizeProblem& problem,
                                const Mxfp8QuantizeBuffers& buffers,
                                CUstream_st* stream,
                                float* tile_sums = nullptr);

// Whether Mxfp8Quantize writes tile_sums for a rowwise-only `problem` (its
// rows then viewed as A x K with K % 32 == 0, e.g. one dbias tree per
// example along K): L % 32 == 0, x 16-byte aligned, the rowwise bytes
// aligned to 16 input bytes' worth.
bool Mxfp8RowTileSumsTake(const Mxfp8QuantizeProblem& problem,
                          const Mxfp8QuantizeBuffers& buffers);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_MXFP8_QUANTIZE_CUDA_H_
