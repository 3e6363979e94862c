// Validation of the operands of the grouped (MoE) ops (grouped/binding.h)
// and their translation into the XLA-free problems of common/grouped_problem.h
// with the kernels' buffers: the preamble (ffi/handler_preamble.h) of the CPU
// and the CUDA handlers.

#ifndef EQX_QUANT_CSRC_GROUPED_ARGS_H_
#define EQX_QUANT_CSRC_GROUPED_ARGS_H_

#include <cstdint>

#include "common/grouped_problem.h"
#include "ffi/handler_preamble.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// The attributes of eqx_quant_grouped_fp8_quantize and
// eqx_quant_grouped_mxfp8_quantize, decoded by name (grouped/binding.h; an
// aggregate: its members in the order of the binding's struct decoding).
struct GroupedQuantizeAttrs {
  int64_t n_batch = 0;
  int64_t rows_per_unit = 1;
  bool rowwise = false;
  bool colwise = false;
};

// eqx_quant_grouped_nvfp4_quantize's: those, then its own two.
struct GroupedNvfp4QuantizeAttrs : GroupedQuantizeAttrs {
  bool use_2d = false;
  bool stochastic_rounding = false;
};

// eqx_quant_grouped_fp8_block_quantize's: those, then its own three.
struct GroupedFp8BlockQuantizeAttrs : GroupedQuantizeAttrs {
  bool use_2d = false;
  bool power_2_scales = false;
  float amax_epsilon = 0.0f;
};

// eqx_quant_grouped_dbias's.
struct GroupedDbiasAttrs {
  int64_t n_batch = 0;
  int64_t rows_per_unit = 1;
};

// Each checks every rank, dimension, element type and attribute against the
// op's contract and returns the problem with the kernel's buffers (row,
// row_scale, col and col_scale null when absent), or an InvalidArgument
// error whose message starts with "eqx_quant_grouped_<op>: " and names the
// offending operand or attribute with what was expected and what was given.
PreparedCallOr<GroupedFp8QuantizeProblem, GroupedFp8QuantizeBuffers>
PrepareGroupedFp8Quantize(const xla::ffi::AnyBuffer& x,
                          const xla::ffi::AnyBuffer& scale,
                          const xla::ffi::AnyBuffer& group_sizes,
                          const xla::ffi::AnyBuffer& row,
                          const xla::ffi::AnyBuffer& col,
                          const xla::ffi::AnyBuffer& scale_inv,
                          const xla::ffi::AnyBuffer& amax,
                          const GroupedQuantizeAttrs& attrs);

PreparedCallOr<GroupedMxfp8QuantizeProblem, GroupedMxfp8QuantizeBuffers>
PrepareGroupedMxfp8Quantize(const xla::ffi::AnyBuffer& x,
                            const xla::ffi::AnyBuffer& group_sizes,
                            const xla::ffi::AnyBuffer& row,
                            const xla::ffi::AnyBuffer& row_scale,
                            const xla::ffi::AnyBuffer& col,
                            const xla::ffi::AnyBuffer& col_scale,
                            const GroupedQuantizeAttrs& attrs);

PreparedCallOr<GroupedNvfp4QuantizeProblem, GroupedNvfp4QuantizeBuffers>
PrepareGroupedNvfp4Quantize(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& amax,
    const xla::ffi::AnyBuffer& keys, const xla::ffi::AnyBuffer& group_sizes,
    const xla::ffi::AnyBuffer& row, const xla::ffi::AnyBuffer& row_scale,
    const xla::ffi::AnyBuffer& col, const xla::ffi::AnyBuffer& col_scale,
    const GroupedNvfp4QuantizeAttrs& attrs);

PreparedCallOr<GroupedFp8BlockQuantizeProblem, GroupedFp8BlockQuantizeBuffers>
PrepareGroupedFp8BlockQuantize(const xla::ffi::AnyBuffer& x,
                               const xla::ffi::AnyBuffer& group_sizes,
                               const xla::ffi::AnyBuffer& row,
                               const xla::ffi::AnyBuffer& row_scale,
                               const xla::ffi::AnyBuffer& col,
                               const xla::ffi::AnyBuffer& col_scale,
                               const GroupedFp8BlockQuantizeAttrs& attrs);

PreparedCallOr<GroupedDbiasProblem, GroupedDbiasBuffers> PrepareGroupedDbias(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& group_sizes,
    const xla::ffi::AnyBuffer& dbias, const GroupedDbiasAttrs& attrs);

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_GROUPED_ARGS_H_
