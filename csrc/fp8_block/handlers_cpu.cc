// XLA FFI handler (CPU) of eqx_quant_fp8_block_quantize: the preamble
// (fp8_block/args.h), then the CPU kernel.

#include "common/fp8_block_problem.h"
#include "ffi/cpu_thread_pool.h"
#include "ffi/handler_preamble.h"
#include "fp8_block/args.h"
#include "fp8_block/quantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Fp8BlockQuantizeCpuImpl(
    ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> row,
    ffi::Result<ffi::AnyBuffer> row_scale, ffi::Result<ffi::AnyBuffer> col,
    ffi::Result<ffi::AnyBuffer> col_scale, int64_t n_batch, int64_t flatten_axis,
    bool rowwise, bool colwise, bool use_2d, bool power_2_scales,
    float amax_epsilon) {
  const Fp8BlockQuantizeAttrs attrs{n_batch, flatten_axis, rowwise, colwise,
                                    use_2d,  power_2_scales, amax_epsilon};
  return RunCpuKernel(
      PrepareFp8BlockQuantize(x, *row, *row_scale, *col, *col_scale, attrs),
      MakeParallelFor(pool), cpu::Fp8BlockQuantize);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(Fp8BlockQuantizeCpu,
                              eqx_quant::Fp8BlockQuantizeCpuImpl,
                              eqx_quant::BindCpuThreadPool()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Attr<int64_t>("n_batch")
                                  .Attr<int64_t>("flatten_axis")
                                  .Attr<bool>("rowwise")
                                  .Attr<bool>("colwise")
                                  .Attr<bool>("use_2d")
                                  .Attr<bool>("power_2_scales")
                                  .Attr<float>("amax_epsilon"));
