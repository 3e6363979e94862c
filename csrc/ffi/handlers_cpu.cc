// XLA FFI handler (CPU) of eqx_quant_fp8_quantize: validate, then run the CPU
// kernel.

#include <cstdint>

#include "common/fp8_quantize_problem.h"
#include "common/scoped_ieee_float_env.h"
#include "ffi/fp8_quantize_args.h"
#include "ffi/fp8_quantize_binding.h"
#include "kernels/fp8_quantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Fp8QuantizeCpuImpl(
    ffi::AnyBuffer x, ffi::Buffer<ffi::F32> scale,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> col,
    ffi::ResultBuffer<ffi::F32> scale_inv, ffi::ResultBuffer<ffi::F32> amax,
    ffi::ResultBuffer<ffi::F32> dbias, ffi::Result<ffi::AnyBuffer> dbias_cast,
    Fp8QuantizeAttrs attrs) {
  ffi::ErrorOr<Fp8QuantizeProblem> problem = CheckFp8QuantizeOperands(
      x, scale, *row, *col, *scale_inv, *amax, *dbias, *dbias_cast, attrs);
  if (!problem.has_value()) return problem.error();

  Fp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.scale = scale.typed_data();
  buffers.row = static_cast<uint8_t*>(row->untyped_data());
  buffers.col = static_cast<uint8_t*>(col->untyped_data());
  buffers.scale_inv = scale_inv->typed_data();
  buffers.amax = amax->typed_data();
  buffers.dbias = dbias->typed_data();
  buffers.dbias_cast = dbias_cast->untyped_data();

  // XLA's CPU runtime runs with flush-to-zero; the op is specified with IEEE
  // subnormals (the kernel lives in another translation unit, so no float
  // operation can be moved across this switch).
  ScopedIeeeFloatEnv ieee_float_env;
  cpu::Fp8Quantize(*problem, buffers);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Fp8QuantizeCpu, eqx_quant::Fp8QuantizeCpuImpl,
    eqx_quant::BindFp8QuantizeOperands(xla::ffi::Ffi::Bind()));
