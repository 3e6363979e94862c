// CUDA kernel of eqx_quant_grouped_mxfp8_dequantize (docs/grouped.md): a grouped
// MXFP8 rowwise part's (R, N) rows as bfloat16, each value an FP8 payload
// times its E8M0 block scale from the group's swizzled region (exact in
// bfloat16 down to 2^-133, rounded to nearest even below; NaN scale bytes and
// payloads give bfloat16's quiet NaN 0x7FC0), rows of no group 0: what the
// grouped GEMM multiplies (Hopper has no block-scaled MMA). The values are
// those of the pure-JAX grouped dequantize, bit for bit.
//
// The problem (common/dequantize_problem.h) is shared with the CPU kernel
// (grouped/dequantize_cpu.h). No CUDA or XLA types: the stream is the
// driver's CUstream_st*.

#ifndef EQX_QUANT_CSRC_GROUPED_DEQUANTIZE_CUDA_H_
#define EQX_QUANT_CSRC_GROUPED_DEQUANTIZE_CUDA_H_

#include <cstdint>

#include "common/dequantize_problem.h"

struct CUstream_st;

namespace eqx_quant::cuda {

struct GroupedDequantizeStatus {
  bool ok = true;
  int cuda_error = 0;
  const char* what = "";
};

GroupedDequantizeStatus GroupedMxfp8DequantizeBf16(const GroupedMxfp8DequantizeProblem& problem,
                                                   CUstream_st* stream);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_GROUPED_DEQUANTIZE_CUDA_H_
