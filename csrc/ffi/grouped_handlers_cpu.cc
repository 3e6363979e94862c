// XLA FFI handlers (CPU) of the grouped (MoE) ops: eqx_quant_grouped_fp8_quantize,
// eqx_quant_grouped_mxfp8_quantize, eqx_quant_grouped_nvfp4_quantize and
// eqx_quant_grouped_dbias (docs/grouped.md): validate, then run the CPU
// kernels.

#include <cstdint>

#include "common/grouped_problem.h"
#include "common/scoped_ieee_float_env.h"
#include "ffi/grouped_args.h"
#include "ffi/grouped_binding.h"
#include "kernels/grouped_quantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

template <typename T>
T* Data(ffi::Result<ffi::AnyBuffer>& buffer) {
  return static_cast<T*>(buffer->untyped_data());
}

template <typename T>
const T* Data(const ffi::AnyBuffer& buffer) {
  return static_cast<const T*>(buffer.untyped_data());
}

ffi::Error GroupedFp8QuantizeCpuImpl(
    ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> col,
    ffi::Result<ffi::AnyBuffer> scale_inv, ffi::Result<ffi::AnyBuffer> amax,
    int64_t n_batch, int64_t rows_per_unit, bool rowwise, bool colwise) {
  GroupedQuantizeAttrs attrs;
  attrs.n_batch = n_batch;
  attrs.rows_per_unit = rows_per_unit;
  attrs.rowwise = rowwise;
  attrs.colwise = colwise;
  ffi::ErrorOr<GroupedFp8QuantizeProblem> problem =
      CheckGroupedFp8QuantizeOperands(x, scale, group_sizes, *row, *col,
                                      *scale_inv, *amax, attrs);
  if (!problem.has_value()) return problem.error();

  GroupedFp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.scale = Data<float>(scale);
  buffers.group_sizes = Data<int32_t>(group_sizes);
  buffers.row = Data<uint8_t>(row);
  buffers.col = Data<uint8_t>(col);
  buffers.scale_inv = Data<float>(scale_inv);
  buffers.amax = Data<float>(amax);

  // XLA's CPU runtime runs with flush-to-zero; the ops are specified with IEEE
  // subnormals (the kernels live in other translation units, so no float
  // operation can be moved across this switch).
  ScopedIeeeFloatEnv ieee_float_env;
  cpu::GroupedFp8Quantize(*problem, buffers);
  return ffi::Error::Success();
}

ffi::Error GroupedMxfp8QuantizeCpuImpl(
    ffi::AnyBuffer x, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    int64_t n_batch, int64_t rows_per_unit, bool rowwise, bool colwise) {
  GroupedQuantizeAttrs attrs;
  attrs.n_batch = n_batch;
  attrs.rows_per_unit = rows_per_unit;
  attrs.rowwise = rowwise;
  attrs.colwise = colwise;
  ffi::ErrorOr<GroupedMxfp8QuantizeProblem> problem =
      CheckGroupedMxfp8QuantizeOperands(x, group_sizes, *row, *row_scale, *col,
                                        *col_scale, attrs);
  if (!problem.has_value()) return problem.error();

  GroupedMxfp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.group_sizes = Data<int32_t>(group_sizes);
  buffers.row = Data<uint8_t>(row);
  buffers.row_scale = Data<uint8_t>(row_scale);
  buffers.col = Data<uint8_t>(col);
  buffers.col_scale = Data<uint8_t>(col_scale);

  ScopedIeeeFloatEnv ieee_float_env;
  cpu::GroupedMxfp8Quantize(*problem, buffers);
  return ffi::Error::Success();
}

ffi::Error GroupedNvfp4QuantizeCpuImpl(
    ffi::AnyBuffer x, ffi::AnyBuffer amax, ffi::AnyBuffer keys,
    ffi::AnyBuffer group_sizes, ffi::Result<ffi::AnyBuffer> row,
    ffi::Result<ffi::AnyBuffer> row_scale, ffi::Result<ffi::AnyBuffer> col,
    ffi::Result<ffi::AnyBuffer> col_scale, int64_t n_batch,
    int64_t rows_per_unit, bool rowwise, bool colwise, bool use_2d,
    bool stochastic_rounding) {
  GroupedQuantizeAttrs attrs;
  attrs.n_batch = n_batch;
  attrs.rows_per_unit = rows_per_unit;
  attrs.rowwise = rowwise;
  attrs.colwise = colwise;
  attrs.use_2d = use_2d;
  attrs.stochastic_rounding = stochastic_rounding;
  ffi::ErrorOr<GroupedNvfp4QuantizeProblem> problem =
      CheckGroupedNvfp4QuantizeOperands(x, amax, keys, group_sizes, *row,
                                        *row_scale, *col, *col_scale, attrs);
  if (!problem.has_value()) return problem.error();

  GroupedNvfp4QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.amax = Data<float>(amax);
  buffers.keys = Data<uint32_t>(keys);
  buffers.group_sizes = Data<int32_t>(group_sizes);
  buffers.row = Data<uint8_t>(row);
  buffers.row_scale = Data<uint8_t>(row_scale);
  buffers.col = Data<uint8_t>(col);
  buffers.col_scale = Data<uint8_t>(col_scale);

  ScopedIeeeFloatEnv ieee_float_env;
  cpu::GroupedNvfp4Quantize(*problem, buffers);
  return ffi::Error::Success();
}

ffi::Error GroupedDbiasCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer group_sizes,
                               ffi::Result<ffi::AnyBuffer> dbias,
                               int64_t n_batch, int64_t rows_per_unit) {
  ffi::ErrorOr<GroupedDbiasProblem> problem = CheckGroupedDbiasOperands(
      x, group_sizes, *dbias, n_batch, rows_per_unit);
  if (!problem.has_value()) return problem.error();

  GroupedDbiasBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.group_sizes = Data<int32_t>(group_sizes);
  buffers.dbias = Data<float>(dbias);

  ScopedIeeeFloatEnv ieee_float_env;
  cpu::GroupedDbias(*problem, buffers);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedFp8QuantizeCpu, eqx_quant::GroupedFp8QuantizeCpuImpl,
    eqx_quant::BindGroupedFp8QuantizeOperands(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedMxfp8QuantizeCpu, eqx_quant::GroupedMxfp8QuantizeCpuImpl,
    eqx_quant::BindGroupedMxfp8QuantizeOperands(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedNvfp4QuantizeCpu, eqx_quant::GroupedNvfp4QuantizeCpuImpl,
    eqx_quant::BindGroupedNvfp4QuantizeOperands(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedDbiasCpu, eqx_quant::GroupedDbiasCpuImpl,
    eqx_quant::BindGroupedDbiasOperands(xla::ffi::Ffi::Bind()));
