// XLA FFI handler (CPU) of eqx_quant_fp8_quantize: the preamble
// (fp8/args.h), then the CPU kernel.

#include "common/fp8_quantize_problem.h"
#include "ffi/cpu_thread_pool.h"
#include "ffi/handler_preamble.h"
#include "fp8/args.h"
#include "fp8/binding.h"
#include "fp8/quantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Fp8QuantizeCpuImpl(
    ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::Buffer<ffi::F32> scale,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> col,
    ffi::ResultBuffer<ffi::F32> scale_inv, ffi::ResultBuffer<ffi::F32> amax,
    ffi::ResultBuffer<ffi::F32> dbias, ffi::Result<ffi::AnyBuffer> dbias_cast,
    Fp8QuantizeAttrs attrs) {
  return RunCpuKernel(PrepareFp8Quantize(x, scale, *row, *col, *scale_inv,
                                         *amax, *dbias, *dbias_cast, attrs),
                      MakeParallelFor(pool), cpu::Fp8Quantize);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Fp8QuantizeCpu, eqx_quant::Fp8QuantizeCpuImpl,
    eqx_quant::BindFp8QuantizeOperands(eqx_quant::BindCpuThreadPool()));
