// XLA FFI handler (CPU) of eqx_quant_mxfp8_quantize: validate, then run the
// CPU kernel (and, with dbias, the FP8 CPU kernel's dbias-only form).

#include <cstdint>
#include <vector>

#include "common/fp8_quantize_problem.h"
#include "common/mxfp8_problem.h"
#include "common/scoped_ieee_float_env.h"
#include "ffi/mxfp8_quantize_args.h"
#include "ffi/mxfp8_quantize_binding.h"
#include "kernels/fp8_quantize_cpu.h"
#include "kernels/mxfp8_quantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Mxfp8QuantizeCpuImpl(ffi::AnyBuffer x,
                                ffi::Result<ffi::AnyBuffer> row,
                                ffi::Result<ffi::AnyBuffer> row_scale,
                                ffi::Result<ffi::AnyBuffer> col,
                                ffi::Result<ffi::AnyBuffer> col_scale,
                                ffi::ResultBuffer<ffi::F32> dbias_nodes,
                                ffi::Result<ffi::AnyBuffer> dbias_cast,
                                Mxfp8QuantizeAttrs attrs) {
  Fp8QuantizeProblem dbias;
  ffi::ErrorOr<Mxfp8QuantizeProblem> problem = CheckMxfp8QuantizeOperands(
      x, *row, *row_scale, *col, *col_scale, *dbias_nodes, *dbias_cast, attrs,
      &dbias);
  if (!problem.has_value()) return problem.error();
  Mxfp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.row = static_cast<uint8_t*>(row->untyped_data());
  buffers.row_scale = static_cast<uint8_t*>(row_scale->untyped_data());
  buffers.col = static_cast<uint8_t*>(col->untyped_data());
  buffers.col_scale = static_cast<uint8_t*>(col_scale->untyped_data());
  // XLA's CPU runtime runs with flush-to-zero; the op is specified with IEEE
  // subnormals (the kernel lives in another translation unit, so no float
  // operation can be moved across this switch).
  ScopedIeeeFloatEnv ieee_float_env;
  cpu::Mxfp8Quantize(*problem, buffers);
  if (dbias.with_dbias) {
    // The FP8 kernel's dbias-only form (its scale, scale_inv and amax are
    // per-example scalars nobody reads).
    std::vector<float> scale(static_cast<size_t>(dbias.batch), 1.0f);
    std::vector<float> unread(2 * scale.size());
    Fp8QuantizeBuffers sums;
    sums.x = buffers.x;
    sums.scale = scale.data();
    sums.scale_inv = unread.data();
    sums.amax = unread.data() + scale.size();
    sums.dbias = dbias_nodes->typed_data();
    sums.dbias_cast = dbias_cast->untyped_data();
    cpu::Fp8Quantize(dbias, sums);
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Mxfp8QuantizeCpu, eqx_quant::Mxfp8QuantizeCpuImpl,
    eqx_quant::BindMxfp8QuantizeOperands(xla::ffi::Ffi::Bind()));
