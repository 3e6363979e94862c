// XLA FFI handlers (CPU) of eqx_quant_nvfp4_amax and eqx_quant_nvfp4_quantize:
// validate, then run the CPU kernels.

#include <cstdint>

#include "common/nvfp4_problem.h"
#include "common/scoped_ieee_float_env.h"
#include "ffi/nvfp4_binding.h"
#include "ffi/nvfp4_quantize_args.h"
#include "kernels/nvfp4_quantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Nvfp4AmaxCpuImpl(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> amax,
                            ffi::Result<ffi::AnyBuffer> rht_amax,
                            int64_t n_batch, int64_t block_axis, bool with_rht,
                            int64_t rht_sign_mask) {
  const Nvfp4AmaxAttrs attrs{n_batch, block_axis, with_rht, rht_sign_mask};
  ffi::ErrorOr<Nvfp4AmaxProblem> problem =
      CheckNvfp4AmaxOperands(x, *amax, *rht_amax, attrs);
  if (!problem.has_value()) return problem.error();

  Nvfp4AmaxBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.amax = static_cast<float*>(amax->untyped_data());
  buffers.rht_amax = static_cast<float*>(rht_amax->untyped_data());

  // XLA's CPU runtime runs with flush-to-zero; the RHT is specified with IEEE
  // subnormals (the kernel is in another translation unit, so no float
  // operation can move across this switch).
  ScopedIeeeFloatEnv ieee_float_env;
  cpu::Nvfp4Amax(*problem, buffers);
  return ffi::Error::Success();
}

ffi::Error Nvfp4QuantizeCpuImpl(
    ffi::AnyBuffer x, ffi::AnyBuffer amax, ffi::AnyBuffer col_amax,
    ffi::AnyBuffer key, ffi::AnyBuffer offset, ffi::Result<ffi::AnyBuffer> row,
    ffi::Result<ffi::AnyBuffer> row_scale, ffi::Result<ffi::AnyBuffer> col,
    ffi::Result<ffi::AnyBuffer> col_scale, int64_t n_batch, int64_t block_axis,
    bool rowwise, bool colwise, bool use_2d, bool use_rht,
    int64_t rht_sign_mask, bool stochastic_rounding,
    ffi::Span<const int64_t> global_shape) {
  const Nvfp4QuantizeAttrs attrs{n_batch, block_axis,    rowwise,
                                 colwise, use_2d,        use_rht,
                                 rht_sign_mask, stochastic_rounding,
                                 global_shape};
  ffi::ErrorOr<Nvfp4QuantizeProblem> problem = CheckNvfp4QuantizeOperands(
      x, amax, col_amax, key, offset, *row, *row_scale, *col, *col_scale,
      attrs);
  if (!problem.has_value()) return problem.error();

  Nvfp4QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.amax = static_cast<const float*>(amax.untyped_data());
  buffers.col_amax = static_cast<const float*>(col_amax.untyped_data());
  buffers.key = static_cast<const uint32_t*>(key.untyped_data());
  buffers.offset = static_cast<const int32_t*>(offset.untyped_data());
  buffers.row = static_cast<uint8_t*>(row->untyped_data());
  buffers.row_scale = static_cast<uint8_t*>(row_scale->untyped_data());
  buffers.col = static_cast<uint8_t*>(col->untyped_data());
  buffers.col_scale = static_cast<uint8_t*>(col_scale->untyped_data());

  ScopedIeeeFloatEnv ieee_float_env;
  cpu::Nvfp4Quantize(*problem, buffers);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Nvfp4AmaxCpu, eqx_quant::Nvfp4AmaxCpuImpl,
    eqx_quant::BindNvfp4AmaxOperands(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Nvfp4QuantizeCpu, eqx_quant::Nvfp4QuantizeCpuImpl,
    eqx_quant::BindNvfp4QuantizeOperands(xla::ffi::Ffi::Bind()));
