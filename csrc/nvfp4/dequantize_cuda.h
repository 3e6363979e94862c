// CUDA kernel of eqx_quant_nvfp4_dequantize (docs/block_formats.md): a dense
// NVFP4 part's values in its stored layout, each E2M1 code times its E4M3
// block scale times the example's global decode scale (fl(amax / 2688), given),
// as bfloat16 (rounded to nearest even) or float32: the operand a bfloat16
// GEMM multiplies on Hopper (decode scale 1: the exact values), bit for bit
// the pure-JAX dequantize (reference/blocks_nd.py nvfp4_dequantize_with).
// Parts with a random Hadamard transform stay on the pure-JAX path.
//
// The problem (common/dequantize_problem.h) is shared with the CPU kernel
// (nvfp4/dequantize_cpu.h).
//
// No CUDA or XLA types: the stream is the driver's CUstream_st*.

#ifndef EQX_QUANT_CSRC_NVFP4_DEQUANTIZE_CUDA_H_
#define EQX_QUANT_CSRC_NVFP4_DEQUANTIZE_CUDA_H_

#include <cstdint>

#include "common/dequantize_problem.h"

struct CUstream_st;

namespace eqx_quant::cuda {

// The launch's CUDA error (0: none).
int Nvfp4Dequantize(const Nvfp4DequantizeProblem& problem, CUstream_st* stream);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_NVFP4_DEQUANTIZE_CUDA_H_
