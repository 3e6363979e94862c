// Per-column canonical tree sums over equal chunks of rows, with the amax of
// the rows read (sm_90a; grouped/dbias_cuda.cu's DbiasTreeKernel).
// The FP8 op's dbias with current scaling uses it as its one pass over x
// before the cast: the dbias node sums and the amax the scale needs; the
// MXFP8 op's dbias uses it with the MXFP8 rowwise output written in the same
// read.

#ifndef EQX_QUANT_CSRC_GROUPED_COLUMN_TREE_SUMS_CUDA_H_
#define EQX_QUANT_CSRC_GROUPED_COLUMN_TREE_SUMS_CUDA_H_

#include <cstdint>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"  // InputType
#include "grouped/quantize_cuda.h"  // GroupedLaunchStatus

struct CUstream_st;

namespace eqx_quant::cuda {

struct ColumnTreeSums {
  const void* x = nullptr;  // batch x rows x cols, of input_type
  InputType input_type = InputType::kF32;
  int64_t batch = 1;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t nodes = 1;      // rows % nodes == 0
  float* sums = nullptr;  // batch x nodes x cols
  float* amax = nullptr;  // batch, zeroed before; null: no amax
  // Null, or x quantized to MXFP8 rowwise in the same read (1x32 blocks along
  // each row, exactly the MXFP8 kernels' bytes; ColumnTreeSumsTakeMxfp8):
  uint8_t* mx_row = nullptr;        // batch x rows x cols FP8 bytes
  uint8_t* mx_row_scale = nullptr;  // batch x rows x cols / 32 E8M0 bytes
  Fp8Format mx_format = Fp8Format::kE4M3Fn;
};

// Whether LaunchColumnTreeSums can write the MXFP8 rowwise output of
// `problem` (its mx_* fields aside): cols % 32 == 0, x 16-byte aligned, no
// amax, and a node short enough for the kernel's 16-byte lanes.
bool ColumnTreeSumsTakeMxfp8(const ColumnTreeSums& problem);

// sums[b][k][n] = the canonical tree sum (common/tree_sum.h) of x[b][i][n]
// over the rows i of chunk k ([k * L, (k + 1) * L), L = rows / nodes), NaN
// canonical; amax[b] = max(amax[b], NaN-ignoring max |x[b]|) by atomicMax.
GroupedLaunchStatus LaunchColumnTreeSums(const ColumnTreeSums& problem,
                                         CUstream_st* stream);

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_GROUPED_COLUMN_TREE_SUMS_CUDA_H_
