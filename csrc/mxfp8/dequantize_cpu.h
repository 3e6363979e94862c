// CPU kernel of eqx_quant_mxfp8_dequantize (common/dequantize_problem.h): a
// dense MXFP8 part's values, each FP8 payload times its E8M0 block scale
// (exact in float32), as float32 or bfloat16 (rounded to nearest even), NaN
// payloads and scales giving the quiet NaN; bit for bit the pure-JAX dequantize
// (reference/blocks_nd.py mxfp8_dequantize) and the CUDA kernel
// (mxfp8/dequantize_cuda.h). Plain C++ over raw pointers; no XLA types.

#ifndef EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_CPU_H_
#define EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_CPU_H_

#include "common/dequantize_problem.h"
#include "common/parallel_for.h"

namespace eqx_quant::cpu {

// The products are IEEE float32 (2^-127 scales give subnormals): the caller
// must run this without flush-to-zero / denormals-are-zero
// (common/scoped_ieee_float_env.h); the threads of `parallel` too. The work is
// split over `parallel` in ranges of rows (B = 1) or of (a, l) lines; the
// bits do not depend on the split.
void Mxfp8Dequantize(const Mxfp8DequantizeProblem& problem,
                     const ParallelFor& parallel = ParallelFor());

}  // namespace eqx_quant::cpu

#endif  // EQX_QUANT_CSRC_MXFP8_DEQUANTIZE_CPU_H_
