// CPU kernels of eqx_quant_nvfp4_amax and eqx_quant_nvfp4_quantize
// (docs/block_formats.md). Plain C++ over raw pointers; no XLA types.
//
// Both must run with round-to-nearest and without flush-to-zero /
// denormals-are-zero (common/scoped_ieee_float_env.h): the scale math, the
// element products and the RHT are IEEE binary32 operations; the threads of
// `parallel` too. The work is split over `parallel` (common/parallel_for.h):
// the amax in flat ranges, the RHT amax and the quantize in ranges of
// (16-row panel, column chunk) items, the quantize only where no two items
// write the same byte (two E2M1 codes share one); the bits do not depend on
// the split.

#ifndef EQX_QUANT_CSRC_NVFP4_QUANTIZE_CPU_H_
#define EQX_QUANT_CSRC_NVFP4_QUANTIZE_CPU_H_

#include "common/nvfp4_problem.h"
#include "common/parallel_for.h"

namespace eqx_quant::cpu {

// For each example: amax = max |float(x)|, NaN ignored (0 if none); with
// with_rht also rht_amax = max |RHT(x)| (bf16 outputs of the 16-point RHT of
// each group of 16 consecutive elements along K, NaN ignored). K % 16 == 0
// when with_rht.
void Nvfp4Amax(const Nvfp4AmaxProblem& problem, const Nvfp4AmaxBuffers& buffers,
               const ParallelFor& parallel = ParallelFor());

// For each example: the rowwise part (blocks of 16 along L) and/or the
// colwise part (blocks of 16 along K, stored transposed as (C, L, A, K), RHT
// first if use_rht) with the global amaxes given, 1D or 2D (16x16 tile
// amax) block scales, round-to-nearest-even or stochastic rounding.
void Nvfp4Quantize(const Nvfp4QuantizeProblem& problem,
                   const Nvfp4QuantizeBuffers& buffers,
                   const ParallelFor& parallel = ParallelFor());

}  // namespace eqx_quant::cpu

#endif  // EQX_QUANT_CSRC_NVFP4_QUANTIZE_CPU_H_
