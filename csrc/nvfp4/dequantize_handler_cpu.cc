// XLA FFI handler (CPU) of eqx_quant_nvfp4_dequantize (nvfp4/dequantize_cpu.h;
// operands: ffi/dequantize_args.h).

#include "common/scoped_ieee_float_env.h"
#include "ffi/cpu_thread_pool.h"
#include "ffi/dequantize_args.h"
#include "nvfp4/dequantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Nvfp4DequantizeCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer codes,
                                  ffi::AnyBuffer scales, ffi::AnyBuffer decode_scales,
                                  ffi::Result<ffi::AnyBuffer> out) {
  const ffi::ErrorOr<Nvfp4DequantizeProblem> p = PrepareNvfp4Dequantize(
      "eqx_quant_nvfp4_dequantize_cpu", codes, scales, decode_scales, *out);
  if (!p.has_value()) return p.error();
  // IEEE subnormals under XLA's flush-to-zero CPU runtime (the helper threads
  // of `parallel` switch themselves).
  ScopedIeeeFloatEnv ieee_float_env;
  cpu::Nvfp4Dequantize(*p, MakeParallelFor(pool));
  return ffi::Error::Success();
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(Nvfp4DequantizeCpu, eqx_quant::Nvfp4DequantizeCpuImpl,
                              eqx_quant::BindCpuThreadPool()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
