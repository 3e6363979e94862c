// XLA FFI handler (CPU) of eqx_quant_mxfp8_dequantize (mxfp8/dequantize_cpu.h;
// operands: ffi/dequantize_args.h).

#include "ffi/cpu_thread_pool.h"
#include "ffi/dequantize_args.h"
#include "ffi/handler_preamble.h"
#include "mxfp8/dequantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Mxfp8DequantizeCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer data,
                                  ffi::AnyBuffer scales, ffi::Result<ffi::AnyBuffer> out) {
  // IEEE subnormals under XLA's flush-to-zero CPU runtime (ffi/handler_preamble.h).
  return RunCpuProblem(
      PrepareMxfp8Dequantize("eqx_quant_mxfp8_dequantize_cpu", data, scales, *out),
      MakeParallelFor(pool), &cpu::Mxfp8Dequantize);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(Mxfp8DequantizeCpu, eqx_quant::Mxfp8DequantizeCpuImpl,
                              eqx_quant::BindCpuThreadPool()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
