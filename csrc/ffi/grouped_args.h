// Validation of the operands of the grouped (MoE) ops (ffi/grouped_binding.h;
// shared by the CPU and CUDA handlers) and their translation into the
// XLA-free problems of common/grouped_problem.h.

#ifndef EQX_QUANT_CSRC_FFI_GROUPED_ARGS_H_
#define EQX_QUANT_CSRC_FFI_GROUPED_ARGS_H_

#include <cstdint>

#include "common/grouped_problem.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// The attributes of the grouped quantize ops, as bound in grouped_binding.h
// (use_2d and stochastic_rounding: NVFP4 only, false for the others).
struct GroupedQuantizeAttrs {
  int64_t n_batch = 0;
  int64_t rows_per_unit = 1;
  bool rowwise = false;
  bool colwise = false;
  bool use_2d = false;
  bool stochastic_rounding = false;
};

// Each checks every rank, dimension, element type and attribute against the
// op's contract and returns the problem, or an InvalidArgument error whose
// message starts with "eqx_quant_grouped_<op>: " and names the offending
// operand or attribute with what was expected and what was given.
xla::ffi::ErrorOr<GroupedFp8QuantizeProblem> CheckGroupedFp8QuantizeOperands(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& scale,
    const xla::ffi::AnyBuffer& group_sizes, const xla::ffi::AnyBuffer& row,
    const xla::ffi::AnyBuffer& col, const xla::ffi::AnyBuffer& scale_inv,
    const xla::ffi::AnyBuffer& amax, const GroupedQuantizeAttrs& attrs);

xla::ffi::ErrorOr<GroupedMxfp8QuantizeProblem>
CheckGroupedMxfp8QuantizeOperands(const xla::ffi::AnyBuffer& x,
                                  const xla::ffi::AnyBuffer& group_sizes,
                                  const xla::ffi::AnyBuffer& row,
                                  const xla::ffi::AnyBuffer& row_scale,
                                  const xla::ffi::AnyBuffer& col,
                                  const xla::ffi::AnyBuffer& col_scale,
                                  const GroupedQuantizeAttrs& attrs);

xla::ffi::ErrorOr<GroupedNvfp4QuantizeProblem>
CheckGroupedNvfp4QuantizeOperands(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& amax,
    const xla::ffi::AnyBuffer& keys, const xla::ffi::AnyBuffer& group_sizes,
    const xla::ffi::AnyBuffer& row, const xla::ffi::AnyBuffer& row_scale,
    const xla::ffi::AnyBuffer& col, const xla::ffi::AnyBuffer& col_scale,
    const GroupedQuantizeAttrs& attrs);

xla::ffi::ErrorOr<GroupedDbiasProblem> CheckGroupedDbiasOperands(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& group_sizes,
    const xla::ffi::AnyBuffer& dbias, int64_t n_batch, int64_t rows_per_unit);

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_GROUPED_ARGS_H_
