// XLA FFI handler (CPU) of eqx_quant_fp8_block_quantize: the preamble
// (fp8_block/args.h), then the CPU kernel.

#include "common/fp8_block_problem.h"
#include "ffi/cpu_thread_pool.h"
#include "ffi/handler_preamble.h"
#include "fp8_block/args.h"
#include "fp8_block/binding.h"
#include "fp8_block/quantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Fp8BlockQuantizeCpuImpl(
    ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> row,
    ffi::Result<ffi::AnyBuffer> row_scale, ffi::Result<ffi::AnyBuffer> col,
    ffi::Result<ffi::AnyBuffer> col_scale, Fp8BlockQuantizeAttrs attrs) {
  return RunCpuKernel(
      PrepareFp8BlockQuantize(x, *row, *row_scale, *col, *col_scale, attrs),
      MakeParallelFor(pool), cpu::Fp8BlockQuantize);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Fp8BlockQuantizeCpu, eqx_quant::Fp8BlockQuantizeCpuImpl,
    eqx_quant::BindFp8BlockQuantizeOperands(eqx_quant::BindCpuThreadPool()));
