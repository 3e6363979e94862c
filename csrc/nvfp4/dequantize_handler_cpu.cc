// XLA FFI handler (CPU) of eqx_quant_nvfp4_dequantize (nvfp4/dequantize_cpu.h;
// operands: ffi/dequantize_args.h).

#include "ffi/cpu_thread_pool.h"
#include "ffi/dequantize_args.h"
#include "ffi/handler_preamble.h"
#include "nvfp4/dequantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Nvfp4DequantizeCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer codes,
                                  ffi::AnyBuffer scales, ffi::AnyBuffer decode_scales,
                                  ffi::Result<ffi::AnyBuffer> out) {
  // IEEE subnormals under XLA's flush-to-zero CPU runtime (ffi/handler_preamble.h).
  return RunCpuProblem(PrepareNvfp4Dequantize("eqx_quant_nvfp4_dequantize_cpu", codes, scales,
                                              decode_scales, *out),
                       MakeParallelFor(pool), &cpu::Nvfp4Dequantize);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(Nvfp4DequantizeCpu, eqx_quant::Nvfp4DequantizeCpuImpl,
                              eqx_quant::BindCpuThreadPool()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
