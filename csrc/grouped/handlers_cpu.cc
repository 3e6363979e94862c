// XLA FFI handlers (CPU) of the grouped (MoE) ops:
// eqx_quant_grouped_fp8_quantize, eqx_quant_grouped_mxfp8_quantize,
// eqx_quant_grouped_nvfp4_quantize, eqx_quant_grouped_fp8_block_quantize and
// eqx_quant_grouped_dbias
// (docs/grouped.md): the preamble (grouped/args.h), then the CPU kernels.

#include "common/grouped_problem.h"
#include "ffi/cpu_thread_pool.h"
#include "ffi/handler_preamble.h"
#include "grouped/args.h"
#include "grouped/binding.h"
#include "grouped/quantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error GroupedFp8QuantizeCpuImpl(
    ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale,
    ffi::AnyBuffer group_sizes, ffi::Result<ffi::AnyBuffer> row,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> scale_inv,
    ffi::Result<ffi::AnyBuffer> amax, GroupedQuantizeAttrs attrs) {
  return RunCpuKernel(PrepareGroupedFp8Quantize(x, scale, group_sizes, *row,
                                                *col, *scale_inv, *amax, attrs),
                      MakeParallelFor(pool), cpu::GroupedFp8Quantize);
}

ffi::Error GroupedMxfp8QuantizeCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer x,
                                       ffi::AnyBuffer group_sizes,
                                       ffi::Result<ffi::AnyBuffer> row,
                                       ffi::Result<ffi::AnyBuffer> row_scale,
                                       ffi::Result<ffi::AnyBuffer> col,
                                       ffi::Result<ffi::AnyBuffer> col_scale,
                                       GroupedQuantizeAttrs attrs) {
  return RunCpuKernel(
      PrepareGroupedMxfp8Quantize(x, group_sizes, *row, *row_scale, *col,
                                  *col_scale, attrs),
      MakeParallelFor(pool), cpu::GroupedMxfp8Quantize);
}

ffi::Error GroupedNvfp4QuantizeCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer x,
                                       ffi::AnyBuffer amax, ffi::AnyBuffer keys,
                                       ffi::AnyBuffer group_sizes,
                                       ffi::Result<ffi::AnyBuffer> row,
                                       ffi::Result<ffi::AnyBuffer> row_scale,
                                       ffi::Result<ffi::AnyBuffer> col,
                                       ffi::Result<ffi::AnyBuffer> col_scale,
                                       GroupedNvfp4QuantizeAttrs attrs) {
  return RunCpuKernel(
      PrepareGroupedNvfp4Quantize(x, amax, keys, group_sizes, *row, *row_scale,
                                  *col, *col_scale, attrs),
      MakeParallelFor(pool), cpu::GroupedNvfp4Quantize);
}

ffi::Error GroupedFp8BlockQuantizeCpuImpl(
    ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    GroupedFp8BlockQuantizeAttrs attrs) {
  return RunCpuKernel(
      PrepareGroupedFp8BlockQuantize(x, group_sizes, *row, *row_scale, *col,
                                     *col_scale, attrs),
      MakeParallelFor(pool), cpu::GroupedFp8BlockQuantize);
}

ffi::Error GroupedDbiasCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer x,
                               ffi::AnyBuffer group_sizes,
                               ffi::Result<ffi::AnyBuffer> dbias,
                               GroupedDbiasAttrs attrs) {
  return RunCpuKernel(PrepareGroupedDbias(x, group_sizes, *dbias, attrs),
                      MakeParallelFor(pool), cpu::GroupedDbias);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedFp8QuantizeCpu, eqx_quant::GroupedFp8QuantizeCpuImpl,
    eqx_quant::BindGroupedFp8QuantizeOperands(eqx_quant::BindCpuThreadPool()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedMxfp8QuantizeCpu,
                              eqx_quant::GroupedMxfp8QuantizeCpuImpl,
                              eqx_quant::BindGroupedMxfp8QuantizeOperands(
                                  eqx_quant::BindCpuThreadPool()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedNvfp4QuantizeCpu,
                              eqx_quant::GroupedNvfp4QuantizeCpuImpl,
                              eqx_quant::BindGroupedNvfp4QuantizeOperands(
                                  eqx_quant::BindCpuThreadPool()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedFp8BlockQuantizeCpu,
                              eqx_quant::GroupedFp8BlockQuantizeCpuImpl,
                              eqx_quant::BindGroupedFp8BlockQuantizeOperands(
                                  eqx_quant::BindCpuThreadPool()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedDbiasCpu, eqx_quant::GroupedDbiasCpuImpl,
    eqx_quant::BindGroupedDbiasOperands(eqx_quant::BindCpuThreadPool()));
