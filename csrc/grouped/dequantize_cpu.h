// CPU kernel of eqx_quant_grouped_mxfp8_dequantize (common/dequantize_problem.h):
// a grouped MXFP8 rowwise part's (R, N) rows as bfloat16, each FP8 payload times
// its E8M0 block scale from its group's swizzled region, rounded to nearest
// even (NaN as 0x7FC0); rows of no group 0. Bit for bit the pure-JAX grouped
// dequantize (reference/grouped.py grouped_mxfp8_rows_bf16) and the CUDA
// kernel (grouped/dequantize_cuda.h). Plain C++ over raw pointers; no XLA types.

#ifndef EQX_QUANT_CSRC_GROUPED_DEQUANTIZE_CPU_H_
#define EQX_QUANT_CSRC_GROUPED_DEQUANTIZE_CPU_H_

#include "common/dequantize_problem.h"
#include "common/parallel_for.h"

namespace eqx_quant::cpu {

// Bad group sizes never read or write out of bounds: the groups' rows are
// clamped to R as in every grouped op (common/grouped_layout.h). The products
// are IEEE float32 (2^-127 scales give subnormals): the caller must run this
// without flush-to-zero / denormals-are-zero (common/scoped_ieee_float_env.h);
// the threads of `parallel` too. Split over `parallel` in ranges of rows.
void GroupedMxfp8DequantizeBf16(const GroupedMxfp8DequantizeProblem& problem,
                                const ParallelFor& parallel = ParallelFor());

}  // namespace eqx_quant::cpu

#endif  // EQX_QUANT_CSRC_GROUPED_DEQUANTIZE_CPU_H_
