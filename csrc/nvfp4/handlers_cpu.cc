// XLA FFI handlers (CPU) of eqx_quant_nvfp4_amax and eqx_quant_nvfp4_quantize:
// the preamble (nvfp4/args.h), then the CPU kernels.

#include "common/nvfp4_problem.h"
#include "ffi/cpu_thread_pool.h"
#include "ffi/handler_preamble.h"
#include "nvfp4/args.h"
#include "nvfp4/binding.h"
#include "nvfp4/quantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Nvfp4AmaxCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer x,
                            ffi::Result<ffi::AnyBuffer> amax,
                            ffi::Result<ffi::AnyBuffer> rht_amax,
                            Nvfp4AmaxAttrs attrs) {
  return RunCpuKernel(PrepareNvfp4Amax(x, *amax, *rht_amax, attrs),
                      MakeParallelFor(pool), cpu::Nvfp4Amax);
}

ffi::Error Nvfp4QuantizeCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer x,
                                ffi::AnyBuffer amax, ffi::AnyBuffer col_amax,
                                ffi::AnyBuffer key, ffi::AnyBuffer offset,
                                ffi::Result<ffi::AnyBuffer> row,
                                ffi::Result<ffi::AnyBuffer> row_scale,
                                ffi::Result<ffi::AnyBuffer> col,
                                ffi::Result<ffi::AnyBuffer> col_scale,
                                Nvfp4QuantizeAttrs attrs) {
  return RunCpuKernel(PrepareNvfp4Quantize(x, amax, col_amax, key, offset, *row,
                                           *row_scale, *col, *col_scale, attrs),
                      MakeParallelFor(pool), cpu::Nvfp4Quantize);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Nvfp4AmaxCpu, eqx_quant::Nvfp4AmaxCpuImpl,
    eqx_quant::BindNvfp4AmaxOperands(eqx_quant::BindCpuThreadPool()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Nvfp4QuantizeCpu, eqx_quant::Nvfp4QuantizeCpuImpl,
    eqx_quant::BindNvfp4QuantizeOperands(eqx_quant::BindCpuThreadPool()));
