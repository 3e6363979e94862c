// CPU kernel of eqx_quant_fp8_quantize: per-tensor-scaled FP8 cast (rowwise
// and/or transposed colwise), amax and the fused bias gradient, in one pass
// over the input. Plain C++ over raw pointers; no XLA types.

#ifndef EQX_QUANT_CSRC_FP8_QUANTIZE_CPU_H_
#define EQX_QUANT_CSRC_FP8_QUANTIZE_CPU_H_

#include "common/fp8_quantize_problem.h"
#include "common/parallel_for.h"

namespace eqx_quant::cpu {

// For each example b:
//   row[b][i][j] = fp8(float(x[b][i][j]) * scale[b])          (if rowwise)
//   col[b][j][i] = the same byte                               (if colwise)
//   scale_inv[b] = 1.0f / scale[b]
//   amax[b]      = max |float(x[b])|, NaN ignored, 0 if none
//   dbias[b]     = canonical tree sum (common/tree_sum.h) of float(x[b]) over
//                  the reduced row axes                        (if with_dbias):
//                  per kept row, the dbias_split node sums of the split axis
//                  with node 0 replaced by the tree over all of them (the
//                  whole axis' tree)
//   dbias_cast[b] = node 0 of each kept row in the input type (if
//                  dbias_cast; common/float_narrow.h)
// The product is one IEEE f32 multiply and the sums IEEE f32 adds: the caller
// must run this with round-to-nearest and without flush-to-zero /
// denormals-are-zero (see common/scoped_ieee_float_env.h); the threads of
// `parallel` too.
//
// The work is split over `parallel` (common/parallel_for.h): the amax pass
// and a rowwise-only cast in flat ranges, a transposed copy in (row range,
// column panel) pairs, dbias in column ranges (every tree of a column on one
// task); small examples are taken whole, several per task. The bits do not
// depend on the split.
void Fp8Quantize(const Fp8QuantizeProblem& problem,
                 const Fp8QuantizeBuffers& buffers,
                 const ParallelFor& parallel = ParallelFor());

}  // namespace eqx_quant::cpu

#endif  // EQX_QUANT_CSRC_FP8_QUANTIZE_CPU_H_
