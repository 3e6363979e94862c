// The CPU kernel of eqx_quant_fp8_block_quantize (common/fp8_block_problem.h).

#ifndef EQX_QUANT_CSRC_FP8_BLOCK_QUANTIZE_CPU_H_
#define EQX_QUANT_CSRC_FP8_BLOCK_QUANTIZE_CPU_H_

#include "common/fp8_block_problem.h"
#include "common/parallel_for.h"

namespace eqx_quant::cpu {

// Quantizes every example; the tasks are the 128x128 tiles of the examples'
// 2-D views (each writes bytes no other writes), so the bytes do not depend
// on the thread count.
void Fp8BlockQuantize(const Fp8BlockQuantizeProblem& problem,
                      const Fp8BlockQuantizeBuffers& buffers,
                      const ParallelFor& parallel);

}  // namespace eqx_quant::cpu

#endif  // EQX_QUANT_CSRC_FP8_BLOCK_QUANTIZE_CPU_H_
