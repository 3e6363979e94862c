// CPU kernel of eqx_quant_mxfp8_quantize: MXFP8 (1x32 and 32x1 blocks, E8M0
// scales) rowwise and/or colwise, in one pass over the input. Plain C++ over
// raw pointers; no XLA types.

#ifndef EQX_QUANT_CSRC_MXFP8_QUANTIZE_CPU_H_
#define EQX_QUANT_CSRC_MXFP8_QUANTIZE_CPU_H_

#include "common/mxfp8_problem.h"
#include "common/parallel_for.h"

namespace eqx_quant::cpu {

// For every block of 32 elements (along L for rowwise, along K for colwise;
// a final partial block as if zero-padded), with amax = the NaN-ignoring
// max |float(x)| of the block (0 if none):
//   E     = e8m0_round_up(fl(amax * fl(1/fp8_max)))   -> the scale byte
//   bytes = fp8_RN_sat(fl(float(x) * 2^(127-E)))      (NaN -> 0x7F)
// (common/e8m0.h). The multiplies are IEEE f32: the caller must run this with
// round-to-nearest and without flush-to-zero / denormals-are-zero (see
// common/scoped_ieee_float_env.h); the threads of `parallel` too. The work
// is split over `parallel` (common/parallel_for.h) in ranges of lines
// (rowwise only) or of 32-row tiles; the bits do not depend on the split.
void Mxfp8Quantize(const Mxfp8QuantizeProblem& problem,
                   const Mxfp8QuantizeBuffers& buffers,
                   const ParallelFor& parallel = ParallelFor());

}  // namespace eqx_quant::cpu

#endif  // EQX_QUANT_CSRC_MXFP8_QUANTIZE_CPU_H_
