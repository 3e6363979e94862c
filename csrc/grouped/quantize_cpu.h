// CPU kernels of the grouped (MoE) ops of docs/grouped.md:
// eqx_quant_grouped_fp8_quantize, eqx_quant_grouped_mxfp8_quantize,
// eqx_quant_grouped_nvfp4_quantize, eqx_quant_grouped_fp8_block_quantize
// (grouped/fp8_block_cpu.cc) and eqx_quant_grouped_dbias. Each group is
// handed to the dense CPU kernel (or, for dbias, the canonical tree sum) as a
// sub-view of the example, so every group's output is bit-identical to the
// dense op applied to the group's rows. Plain C++ over raw pointers; no XLA
// types.
//
// Every output is written in full: the bytes of rows that belong to no group
// and the padding of the scale regions are 0 (except FP8 block scaling's 1x128
// rowwise scales of those rows: an all-zero block's, as the dense op's).
//
// All five must run with round-to-nearest and without flush-to-zero /
// denormals-are-zero (common/scoped_ieee_float_env.h); the threads of
// `parallel` too. The groups are taken in order, each one's work split over
// `parallel` as the dense kernel splits it (dbias: in column ranges); the bits
// do not depend on the split.

#ifndef EQX_QUANT_CSRC_GROUPED_QUANTIZE_CPU_H_
#define EQX_QUANT_CSRC_GROUPED_QUANTIZE_CPU_H_

#include "common/grouped_problem.h"
#include "common/parallel_for.h"

namespace eqx_quant::cpu {

// Per group g: row/col bytes, scale_inv[g] and amax[g] of the dense
// Fp8Quantize of the group's rows with scale[g] (amax 0 for an empty group).
void GroupedFp8Quantize(const GroupedFp8QuantizeProblem& problem,
                        const GroupedFp8QuantizeBuffers& buffers,
                        const ParallelFor& parallel = ParallelFor());

// Per group: the dense Mxfp8Quantize of the group's rows; its scales (the
// rows' scales rowwise, the transposed column scales colwise) in the group's
// swizzled region.
void GroupedMxfp8Quantize(const GroupedMxfp8QuantizeProblem& problem,
                          const GroupedMxfp8QuantizeBuffers& buffers,
                          const ParallelFor& parallel = ParallelFor());

// Per group: the dense Nvfp4Quantize of the group's rows (see
// GroupedNvfp4QuantizeProblem); its scales in the group's swizzled region.
void GroupedNvfp4Quantize(const GroupedNvfp4QuantizeProblem& problem,
                          const GroupedNvfp4QuantizeBuffers& buffers,
                          const ParallelFor& parallel = ParallelFor());

// Per group: the dense Fp8BlockQuantize of the group's rows; its scales in the
// stacked matrices of GroupedFp8BlockQuantizeProblem.
void GroupedFp8BlockQuantize(const GroupedFp8BlockQuantizeProblem& problem,
                             const GroupedFp8BlockQuantizeBuffers& buffers,
                             const ParallelFor& parallel = ParallelFor());

// dbias[g] = canonical tree sum of float(x) over the group's rows (+0.0f if
// empty), written in buffers.dbias_type (common/float_narrow.h: NaN sums as
// that type's quiet NaN).
void GroupedDbias(const GroupedDbiasProblem& problem,
                  const GroupedDbiasBuffers& buffers,
                  const ParallelFor& parallel = ParallelFor());

}  // namespace eqx_quant::cpu

#endif  // EQX_QUANT_CSRC_GROUPED_QUANTIZE_CPU_H_
