// Plain descriptions of the grouped (MoE) ops of docs/grouped.md ("Ops"),
// shared by the FFI layer (which builds them from XLA buffers) and the
// kernels (which run them). No XLA types.
//
// Every op sees `batch` independent examples; example b is the row-major 2-D
// view x[b] = (rows, cols) = (R, N) with its own group_sizes[b] (G int32).
// Group g of an example covers the rows [start_g, start_{g+1}) given by
// grouped::GroupStarts (common/grouped_layout.h); rows from start_G on belong
// to no group and every output byte of theirs is 0.

#ifndef EQX_QUANT_CSRC_COMMON_GROUPED_PROBLEM_H_
#define EQX_QUANT_CSRC_COMMON_GROUPED_PROBLEM_H_

#include <cstdint>

#include "common/fp8_block_problem.h"
#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"  // InputType

namespace eqx_quant {

// The grouped 2-D view shared by the ops.
struct GroupedView {
  InputType input_type = InputType::kF32;
  int64_t batch = 1;          // number of examples (product of Bt)
  int64_t rows = 0;           // R
  int64_t cols = 0;           // N
  int64_t groups = 1;         // G >= 1
  int64_t rows_per_unit = 1;  // U >= 1: rows per unit of group_sizes

  int64_t elements() const { return rows * cols; }
};

// eqx_quant_grouped_fp8_quantize: per group, the dense per-tensor-scaled FP8
// cast of the group's rows with the group's scale.
struct GroupedFp8QuantizeProblem {
  GroupedView view;
  Fp8Format format = Fp8Format::kE4M3Fn;
  bool rowwise = false;
  bool colwise = false;
};

// Per-example blocks are contiguous.
struct GroupedFp8QuantizeBuffers {
  const void* x = nullptr;              // batch x R x N, of InputType
  const float* scale = nullptr;         // batch x G
  const int32_t* group_sizes = nullptr; // batch x G
  uint8_t* row = nullptr;        // batch x R x N, if rowwise
  uint8_t* col = nullptr;        // batch x R*N (group g: N x rows_g at
                                 // start_g * N), if colwise
  float* scale_inv = nullptr;    // batch x G
  float* amax = nullptr;         // batch x G
};

// eqx_quant_grouped_mxfp8_quantize: per group, the dense MXFP8 quantize of the
// group's rows (colwise blocks of 32 rows from the group's start); the scales
// of group g in its padded, swizzled region (docs/grouped.md, "Block scales").
struct GroupedMxfp8QuantizeProblem {
  GroupedView view;
  Fp8Format format = Fp8Format::kE4M3Fn;
  bool rowwise = false;
  bool colwise = false;
  int64_t row_scale_bytes = 0;  // per example, the worst-case length
  int64_t col_scale_bytes = 0;  // per example, the worst-case length
};

struct GroupedMxfp8QuantizeBuffers {
  const void* x = nullptr;               // batch x R x N, of InputType
  const int32_t* group_sizes = nullptr;  // batch x G
  uint8_t* row = nullptr;        // batch x R x N, if rowwise
  uint8_t* row_scale = nullptr;  // batch x row_scale_bytes, if rowwise
  uint8_t* col = nullptr;        // batch x R x N, if colwise
  uint8_t* col_scale = nullptr;  // batch x col_scale_bytes, if colwise
};

// eqx_quant_grouped_nvfp4_quantize: per group, the dense NVFP4 quantize of
// the group's rows (blocked axis = rows, no RHT) with the group's amax for
// both parts, the group's key, offset 0 and global shape (rows_g, N).
struct GroupedNvfp4QuantizeProblem {
  GroupedView view;
  bool rowwise = false;
  bool colwise = false;
  bool use_2d = false;
  bool stochastic_rounding = false;
  int64_t row_scale_bytes = 0;  // per example, the worst-case length
  int64_t col_scale_bytes = 0;  // per example, the worst-case length
};

struct GroupedNvfp4QuantizeBuffers {
  const void* x = nullptr;               // batch x R x N, of InputType
  const float* amax = nullptr;           // batch x G
  const uint32_t* keys = nullptr;        // batch x G x 2
  const int32_t* group_sizes = nullptr;  // batch x G
  // row / col hold E2M1 codes packed two per byte, as XLA stores F4E2M1FN:
  // flat element i (batch included) is nibble i % 2 (0 = low) of byte i / 2,
  // so an example or a group may start in the middle of a byte.
  uint8_t* row = nullptr;        // batch x R x N codes, if rowwise
  uint8_t* row_scale = nullptr;  // batch x row_scale_bytes, if rowwise
  uint8_t* col = nullptr;        // batch x R*N codes (group g: N x rows_g
                                 // at start_g * N), if colwise
  uint8_t* col_scale = nullptr;  // batch x col_scale_bytes, if colwise
};

// eqx_quant_grouped_fp8_block_quantize: per group, the dense FP8 block
// quantize (common/fp8_block_problem.h) of the group's rows, its blocks of 128
// rows counted from the group's first row; the float32 scale_inv matrices
// stacked as docs/grouped.md ("FP8 block scaling") lays them out, with
// k_g = ceil(rows_g / 128) and u_g = sum_{h<g} k_h:
//   1x128 rowwise   (R, nb): row r's blocks at row r; rows of no group hold
//                   the scale_inv of an all-zero block
//   1x128 colwise   (N, W): group g's (N, k_g) in columns [u_g, u_g + k_g)
//   128x128 rowwise (W, nb): group g's (k_g, nb) in rows [u_g, u_g + k_g)
//   128x128 colwise (nb, W): the rowwise matrix transposed
// nb = ceil(N / 128), W = `units` (the most sum_g k_g can be); entries of no
// group are 0 (never a scale_inv).
struct GroupedFp8BlockQuantizeProblem {
  GroupedView view;
  // The settings of every group's dense quantize (format, parts, 1D / 2D,
  // scale rules); its batch, rows and cols are set per group by the kernel.
  Fp8BlockQuantizeProblem block;
  int64_t units = 0;  // W
};

struct GroupedFp8BlockQuantizeBuffers {
  const void* x = nullptr;               // batch x R x N, of InputType
  const int32_t* group_sizes = nullptr;  // batch x G
  uint8_t* row = nullptr;        // batch x R x N, if rowwise
  float* row_scale = nullptr;    // batch x (R or W) x nb, if rowwise
  uint8_t* col = nullptr;        // batch x R*N (group g: N x rows_g at
                                 // start_g * N), if colwise
  float* col_scale = nullptr;    // batch x (N or nb) x W, if colwise
};

// eqx_quant_grouped_dbias: dbias[g] = the canonical tree sum
// (common/tree_sum.h) of the group's rows, +0.0f for an empty group, written
// in dbias_type (common/float_narrow.h: NaN canonical).
struct GroupedDbiasProblem {
  GroupedView view;
};

struct GroupedDbiasBuffers {
  const void* x = nullptr;               // batch x R x N, of InputType
  const int32_t* group_sizes = nullptr;  // batch x G
  void* dbias = nullptr;                 // batch x G x N, of dbias_type
  InputType dbias_type = InputType::kF32;  // the op: x's type
};

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_GROUPED_PROBLEM_H_
