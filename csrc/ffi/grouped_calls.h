// One validated call of a grouped op: the problem (from ffi/grouped_args.h)
// and the kernel's buffer pointers, built the same way for the CPU and the
// CUDA handlers. Absent outputs (shape (0,)) get null pointers.

#ifndef EQX_QUANT_CSRC_FFI_GROUPED_CALLS_H_
#define EQX_QUANT_CSRC_FFI_GROUPED_CALLS_H_

#include <cstdint>

#include "common/grouped_problem.h"
#include "ffi/grouped_args.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

template <typename Problem, typename Buffers>
struct GroupedCall {
  Problem problem;
  Buffers buffers;
};

namespace grouped_calls {

template <typename T>
T* Data(const xla::ffi::AnyBuffer& buffer) {
  return static_cast<T*>(buffer.untyped_data());
}

template <typename T>
T* DataIf(bool present, const xla::ffi::AnyBuffer& buffer) {
  return present ? Data<T>(buffer) : nullptr;
}

}  // namespace grouped_calls

inline xla::ffi::ErrorOr<
    GroupedCall<GroupedFp8QuantizeProblem, GroupedFp8QuantizeBuffers>>
PrepareGroupedFp8Quantize(const xla::ffi::AnyBuffer& x,
                          const xla::ffi::AnyBuffer& scale,
                          const xla::ffi::AnyBuffer& group_sizes,
                          const xla::ffi::AnyBuffer& row,
                          const xla::ffi::AnyBuffer& col,
                          const xla::ffi::AnyBuffer& scale_inv,
                          const xla::ffi::AnyBuffer& amax,
                          const GroupedQuantizeAttrs& attrs) {
  using grouped_calls::Data;
  using grouped_calls::DataIf;
  auto problem = CheckGroupedFp8QuantizeOperands(x, scale, group_sizes, row,
                                                 col, scale_inv, amax, attrs);
  if (!problem.has_value()) return problem.error();
  GroupedFp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.scale = Data<const float>(scale);
  buffers.group_sizes = Data<const int32_t>(group_sizes);
  buffers.row = DataIf<uint8_t>(problem->rowwise, row);
  buffers.col = DataIf<uint8_t>(problem->colwise, col);
  buffers.scale_inv = Data<float>(scale_inv);
  buffers.amax = Data<float>(amax);
  return GroupedCall<GroupedFp8QuantizeProblem, GroupedFp8QuantizeBuffers>{
      *problem, buffers};
}

inline xla::ffi::ErrorOr<
    GroupedCall<GroupedMxfp8QuantizeProblem, GroupedMxfp8QuantizeBuffers>>
PrepareGroupedMxfp8Quantize(const xla::ffi::AnyBuffer& x,
                            const xla::ffi::AnyBuffer& group_sizes,
                            const xla::ffi::AnyBuffer& row,
                            const xla::ffi::AnyBuffer& row_scale,
                            const xla::ffi::AnyBuffer& col,
                            const xla::ffi::AnyBuffer& col_scale,
                            const GroupedQuantizeAttrs& attrs) {
  using grouped_calls::Data;
  using grouped_calls::DataIf;
  auto problem = CheckGroupedMxfp8QuantizeOperands(x, group_sizes, row,
                                                   row_scale, col, col_scale,
                                                   attrs);
  if (!problem.has_value()) return problem.error();
  GroupedMxfp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.group_sizes = Data<const int32_t>(group_sizes);
  buffers.row = DataIf<uint8_t>(problem->rowwise, row);
  buffers.row_scale = DataIf<uint8_t>(problem->rowwise, row_scale);
  buffers.col = DataIf<uint8_t>(problem->colwise, col);
  buffers.col_scale = DataIf<uint8_t>(problem->colwise, col_scale);
  return GroupedCall<GroupedMxfp8QuantizeProblem, GroupedMxfp8QuantizeBuffers>{
      *problem, buffers};
}

inline xla::ffi::ErrorOr<
    GroupedCall<GroupedNvfp4QuantizeProblem, GroupedNvfp4QuantizeBuffers>>
PrepareGroupedNvfp4Quantize(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& amax,
    const xla::ffi::AnyBuffer& keys, const xla::ffi::AnyBuffer& group_sizes,
    const xla::ffi::AnyBuffer& row, const xla::ffi::AnyBuffer& row_scale,
    const xla::ffi::AnyBuffer& col, const xla::ffi::AnyBuffer& col_scale,
    const GroupedQuantizeAttrs& attrs) {
  using grouped_calls::Data;
  using grouped_calls::DataIf;
  auto problem = CheckGroupedNvfp4QuantizeOperands(
      x, amax, keys, group_sizes, row, row_scale, col, col_scale, attrs);
  if (!problem.has_value()) return problem.error();
  GroupedNvfp4QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.amax = Data<const float>(amax);
  buffers.keys = Data<const uint32_t>(keys);
  buffers.group_sizes = Data<const int32_t>(group_sizes);
  buffers.row = DataIf<uint8_t>(problem->rowwise, row);
  buffers.row_scale = DataIf<uint8_t>(problem->rowwise, row_scale);
  buffers.col = DataIf<uint8_t>(problem->colwise, col);
  buffers.col_scale = DataIf<uint8_t>(problem->colwise, col_scale);
  return GroupedCall<GroupedNvfp4QuantizeProblem, GroupedNvfp4QuantizeBuffers>{
      *problem, buffers};
}

inline xla::ffi::ErrorOr<GroupedCall<GroupedDbiasProblem, GroupedDbiasBuffers>>
PrepareGroupedDbias(const xla::ffi::AnyBuffer& x,
                    const xla::ffi::AnyBuffer& group_sizes,
                    const xla::ffi::AnyBuffer& dbias, int64_t n_batch,
                    int64_t rows_per_unit) {
  using grouped_calls::Data;
  auto problem = CheckGroupedDbiasOperands(x, group_sizes, dbias, n_batch,
                                           rows_per_unit);
  if (!problem.has_value()) return problem.error();
  GroupedDbiasBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.group_sizes = Data<const int32_t>(group_sizes);
  buffers.dbias = dbias.untyped_data();
  buffers.dbias_type = problem->view.input_type;
  return GroupedCall<GroupedDbiasProblem, GroupedDbiasBuffers>{*problem,
                                                               buffers};
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_GROUPED_CALLS_H_
