// CPU kernel of eqx_quant_nvfp4_dequantize (common/dequantize_problem.h): a
// dense NVFP4 part's values in its stored layout, fl(fl(E2M1 code x E4M3
// block scale) x the example's global decode scale), as float32 or bfloat16
// (rounded to nearest even), NaN as the quiet NaN; bit for bit the pure-JAX
// dequantize (reference/blocks_nd.py nvfp4_dequantize_with) and the CUDA
// kernel (nvfp4/dequantize_cuda.h). Plain C++ over raw pointers; no XLA types.

#ifndef EQX_QUANT_CSRC_NVFP4_DEQUANTIZE_CPU_H_
#define EQX_QUANT_CSRC_NVFP4_DEQUANTIZE_CPU_H_

#include "common/dequantize_problem.h"
#include "common/parallel_for.h"

namespace eqx_quant::cpu {

// The products are IEEE float32 (subnormal scales and decode scales): the
// caller must run this without flush-to-zero / denormals-are-zero
// (common/scoped_ieee_float_env.h); the threads of `parallel` too. The work is
// split over `parallel` in ranges of rows; the bits do not depend on the split.
void Nvfp4Dequantize(const Nvfp4DequantizeProblem& problem,
                     const ParallelFor& parallel = ParallelFor());

}  // namespace eqx_quant::cpu

#endif  // EQX_QUANT_CSRC_NVFP4_DEQUANTIZE_CPU_H_
