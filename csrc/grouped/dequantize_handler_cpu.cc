// XLA FFI handler (CPU) of eqx_quant_grouped_mxfp8_dequantize
// (grouped/dequantize_cpu.h; operands: ffi/dequantize_args.h).

#include <cstdint>

#include "ffi/cpu_thread_pool.h"
#include "ffi/dequantize_args.h"
#include "ffi/handler_preamble.h"
#include "grouped/dequantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error GroupedMxfp8DequantizeCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer data,
                                         ffi::AnyBuffer scales, ffi::AnyBuffer sizes,
                                         ffi::Result<ffi::AnyBuffer> out,
                                         int64_t rows_per_unit) {
  // IEEE subnormals under XLA's flush-to-zero CPU runtime (ffi/handler_preamble.h).
  return RunCpuProblem(PrepareGroupedMxfp8Dequantize("eqx_quant_grouped_mxfp8_dequantize_cpu",
                                                     data, scales, sizes, *out, rows_per_unit),
                       MakeParallelFor(pool), &cpu::GroupedMxfp8DequantizeBf16);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedMxfp8DequantizeCpu,
                              eqx_quant::GroupedMxfp8DequantizeCpuImpl,
                              eqx_quant::BindCpuThreadPool()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Attr<int64_t>("rows_per_unit"));
