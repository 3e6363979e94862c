// CUDA kernel of eqx_quant_mxfp8_dequantize (docs/block_formats.md): a dense
// MXFP8 part's values, each FP8 payload times its E8M0 block scale, as
// bfloat16 (rounded to nearest even; exact down to 2^-133) or float32 (exact),
// NaN payloads and scales giving the quiet NaN: the operand a bfloat16 GEMM
// multiplies on Hopper (no block-scaled MMA), bit for bit the pure-JAX
// dequantize (reference/blocks_nd.py mxfp8_dequantize).
//
// The problem (common/dequantize_problem.h) is shared with the CPU kernel
// (mxfp8/dequantize_cpu.h).
//
// No CUDA or XLA types: the stream is the driver's CUstream_st*.

#ifndef EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_CUDA_H_
#define EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_CUDA_H_

#include <cstdint>

#include "common/dequantize_problem.h"

struct CUstream_st;

namespace eqx_quant::cuda {

// The launch's CUDA error (0: none).
int Mxfp8Dequantize(const Mxfp8DequantizeProblem& problem, CUstream_st* stream);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_CUDA_H_
