// XLA FFI handler (CPU) of eqx_quant_grouped_mxfp8_dequantize
// (grouped/dequantize_cpu.h; operands: ffi/dequantize_args.h).

#include <cstdint>

#include "common/scoped_ieee_float_env.h"
#include "ffi/cpu_thread_pool.h"
#include "ffi/dequantize_args.h"
#include "grouped/dequantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error GroupedMxfp8DequantizeCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer data,
                                         ffi::AnyBuffer scales, ffi::AnyBuffer sizes,
                                         ffi::Result<ffi::AnyBuffer> out,
                                         int64_t rows_per_unit) {
  const ffi::ErrorOr<GroupedMxfp8DequantizeProblem> p = PrepareGroupedMxfp8Dequantize(
      "eqx_quant_grouped_mxfp8_dequantize_cpu", data, scales, sizes, *out, rows_per_unit);
  if (!p.has_value()) return p.error();
  // IEEE subnormals under XLA's flush-to-zero CPU runtime (the helper threads
  // of `parallel` switch themselves).
  ScopedIeeeFloatEnv ieee_float_env;
  cpu::GroupedMxfp8DequantizeBf16(*p, MakeParallelFor(pool));
  return ffi::Error::Success();
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
