// XLA FFI handlers (CUDA) of the grouped (MoE) ops:
// eqx_quant_grouped_fp8_quantize, eqx_quant_grouped_mxfp8_quantize,
// eqx_quant_grouped_nvfp4_quantize, eqx_quant_grouped_fp8_block_quantize and
// eqx_quant_grouped_dbias (docs/grouped.md): the preamble exactly as on CPU (grouped/args.h), then the
// CUDA kernels (grouped/quantize_cuda.h) enqueued on XLA's stream. Nothing is
// allocated and nothing synchronises, so the handlers can be captured into a
// CUDA graph (kCmdBufferCompatible).

#include <cuda_runtime_api.h>

#include "common/grouped_problem.h"
#include "ffi/cuda_launch_error.h"
#include "ffi/handler_preamble.h"
#include "grouped/args.h"
#include "grouped/binding.h"
#include "grouped/quantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

// The error of a launch status of `target`. A failure that is not a CUDA
// error is a problem outside what the kernels take: an invalid argument.
auto ToError(const char* target) {
  return [target](const cuda::GroupedLaunchStatus& status) {
    return LaunchStatusError(target, status, ffi::ErrorCode::kInvalidArgument);
  };
}

ffi::Error GroupedFp8QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale,
    ffi::AnyBuffer group_sizes, ffi::Result<ffi::AnyBuffer> row,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> scale_inv,
    ffi::Result<ffi::AnyBuffer> amax, GroupedQuantizeAttrs attrs) {
  return EnqueueCudaKernel(
      PrepareGroupedFp8Quantize(x, scale, group_sizes, *row, *col, *scale_inv,
                                *amax, attrs),
      cuda::GroupedFp8Quantize, stream,
      ToError("eqx_quant_grouped_fp8_quantize_cuda"));
}

ffi::Error GroupedMxfp8QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    GroupedQuantizeAttrs attrs) {
  return EnqueueCudaKernel(
      PrepareGroupedMxfp8Quantize(x, group_sizes, *row, *row_scale, *col,
                                  *col_scale, attrs),
      cuda::GroupedMxfp8Quantize, stream,
      ToError("eqx_quant_grouped_mxfp8_quantize_cuda"));
}

ffi::Error GroupedNvfp4QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer amax,
    ffi::AnyBuffer keys, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    GroupedNvfp4QuantizeAttrs attrs) {
  return EnqueueCudaKernel(
      PrepareGroupedNvfp4Quantize(x, amax, keys, group_sizes, *row,
                                  *row_scale, *col, *col_scale, attrs),
      cuda::GroupedNvfp4Quantize, stream,
      ToError("eqx_quant_grouped_nvfp4_quantize_cuda"));
}

ffi::Error GroupedFp8BlockQuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    GroupedFp8BlockQuantizeAttrs attrs) {
  return EnqueueCudaKernel(
      PrepareGroupedFp8BlockQuantize(x, group_sizes, *row, *row_scale, *col,
                                     *col_scale, attrs),
      cuda::GroupedFp8BlockQuantize, stream,
      ToError("eqx_quant_grouped_fp8_block_quantize_cuda"));
}

ffi::Error GroupedDbiasCudaImpl(cudaStream_t stream, ffi::AnyBuffer x,
                                ffi::AnyBuffer group_sizes,
                                ffi::Result<ffi::AnyBuffer> dbias,
                                GroupedDbiasAttrs attrs) {
  return EnqueueCudaKernel(PrepareGroupedDbias(x, group_sizes, *dbias, attrs),
                           cuda::GroupedDbias, stream,
                           ToError("eqx_quant_grouped_dbias_cuda"));
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedFp8QuantizeCuda, eqx_quant::GroupedFp8QuantizeCudaImpl,
    eqx_quant::BindGroupedFp8QuantizeOperands(eqx_quant::BindCudaStream()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedMxfp8QuantizeCuda, eqx_quant::GroupedMxfp8QuantizeCudaImpl,
    eqx_quant::BindGroupedMxfp8QuantizeOperands(eqx_quant::BindCudaStream()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedNvfp4QuantizeCuda, eqx_quant::GroupedNvfp4QuantizeCudaImpl,
    eqx_quant::BindGroupedNvfp4QuantizeOperands(eqx_quant::BindCudaStream()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedFp8BlockQuantizeCuda, eqx_quant::GroupedFp8BlockQuantizeCudaImpl,
    eqx_quant::BindGroupedFp8BlockQuantizeOperands(eqx_quant::BindCudaStream()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedDbiasCuda, eqx_quant::GroupedDbiasCudaImpl,
    eqx_quant::BindGroupedDbiasOperands(eqx_quant::BindCudaStream()),
    {xla::ffi::Traits::kCmdBufferCompatible});
