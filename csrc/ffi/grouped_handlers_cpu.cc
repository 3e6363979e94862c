// XLA FFI handlers (CPU) of the grouped (MoE) ops: eqx_quant_grouped_fp8_quantize,
// eqx_quant_grouped_mxfp8_quantize, eqx_quant_grouped_nvfp4_quantize and
// eqx_quant_grouped_dbias (docs/grouped.md): validate, then run the CPU
// kernels.

#include <cstdint>

#include "common/grouped_problem.h"
#include "common/scoped_ieee_float_env.h"
#include "ffi/grouped_calls.h"
#include "ffi/grouped_binding.h"
#include "kernels/grouped_quantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

// XLA's CPU runtime runs with flush-to-zero; the ops are specified with IEEE
// subnormals (the kernels live in other translation units, so no float
// operation can be moved across this switch).
template <typename Call, typename Kernel>
ffi::Error RunIeee(const Call& call, Kernel kernel) {
  if (!call.has_value()) return call.error();
  ScopedIeeeFloatEnv ieee_float_env;
  kernel(call->problem, call->buffers);
  return ffi::Error::Success();
}

ffi::Error GroupedFp8QuantizeCpuImpl(
    ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> col,
    ffi::Result<ffi::AnyBuffer> scale_inv, ffi::Result<ffi::AnyBuffer> amax,
    int64_t n_batch, int64_t rows_per_unit, bool rowwise, bool colwise) {
  const GroupedQuantizeAttrs attrs{n_batch, rows_per_unit, rowwise, colwise};
  return RunIeee(PrepareGroupedFp8Quantize(x, scale, group_sizes, *row, *col,
                                           *scale_inv, *amax, attrs),
                 cpu::GroupedFp8Quantize);
}

ffi::Error GroupedMxfp8QuantizeCpuImpl(
    ffi::AnyBuffer x, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    int64_t n_batch, int64_t rows_per_unit, bool rowwise, bool colwise) {
  const GroupedQuantizeAttrs attrs{n_batch, rows_per_unit, rowwise, colwise};
  return RunIeee(PrepareGroupedMxfp8Quantize(x, group_sizes, *row, *row_scale,
                                             *col, *col_scale, attrs),
                 cpu::GroupedMxfp8Quantize);
}

ffi::Error GroupedNvfp4QuantizeCpuImpl(
    ffi::AnyBuffer x, ffi::AnyBuffer amax, ffi::AnyBuffer keys,
    ffi::AnyBuffer group_sizes, ffi::Result<ffi::AnyBuffer> row,
    ffi::Result<ffi::AnyBuffer> row_scale, ffi::Result<ffi::AnyBuffer> col,
    ffi::Result<ffi::AnyBuffer> col_scale, int64_t n_batch,
    int64_t rows_per_unit, bool rowwise, bool colwise, bool use_2d,
    bool stochastic_rounding) {
  const GroupedQuantizeAttrs attrs{n_batch, rows_per_unit, rowwise,
                                   colwise, use_2d,        stochastic_rounding};
  return RunIeee(
      PrepareGroupedNvfp4Quantize(x, amax, keys, group_sizes, *row, *row_scale,
                                  *col, *col_scale, attrs),
      cpu::GroupedNvfp4Quantize);
}

ffi::Error GroupedDbiasCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer group_sizes,
                               ffi::Result<ffi::AnyBuffer> dbias,
                               int64_t n_batch, int64_t rows_per_unit) {
  return RunIeee(
      PrepareGroupedDbias(x, group_sizes, *dbias, n_batch, rows_per_unit),
      cpu::GroupedDbias);
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
