// XLA FFI handlers (CUDA) of the grouped (MoE) ops:
// eqx_quant_grouped_fp8_quantize, eqx_quant_grouped_mxfp8_quantize,
// eqx_quant_grouped_nvfp4_quantize and eqx_quant_grouped_dbias
// (docs/grouped.md): validate exactly as on CPU (ffi/grouped_args.h), then
// enqueue the CUDA kernels (kernels/grouped_quantize_cuda.h) on XLA's stream.
// Nothing is allocated and nothing synchronises, so the handlers can be
// captured into a CUDA graph (kCmdBufferCompatible).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "common/grouped_problem.h"
#include "ffi/cuda_launch_error.h"
#include "ffi/grouped_calls.h"
#include "ffi/grouped_binding.h"
#include "kernels/grouped_quantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error ToError(const char* target,
                   const cuda::GroupedLaunchStatus& status) {
  if (status.ok) return ffi::Error::Success();
  return CudaLaunchError(target, status.what, status.cuda_error,
                         ffi::ErrorCode::kInvalidArgument);
}

// Validate, then enqueue the kernel; `target` names the op in messages.
template <typename Call, typename Launch>
ffi::Error Enqueue(const char* target, const Call& call, Launch launch,
                   cudaStream_t stream) {
  if (!call.has_value()) return call.error();
  return ToError(target, launch(call->problem, call->buffers, stream));
}

ffi::Error GroupedFp8QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale,
    ffi::AnyBuffer group_sizes, ffi::Result<ffi::AnyBuffer> row,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> scale_inv,
    ffi::Result<ffi::AnyBuffer> amax, int64_t n_batch, int64_t rows_per_unit,
    bool rowwise, bool colwise) {
  const GroupedQuantizeAttrs attrs{n_batch, rows_per_unit, rowwise, colwise};
  return Enqueue("eqx_quant_grouped_fp8_quantize_cuda",
                 PrepareGroupedFp8Quantize(x, scale, group_sizes, *row, *col,
                                           *scale_inv, *amax, attrs),
                 cuda::GroupedFp8Quantize, stream);
}

ffi::Error GroupedMxfp8QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    int64_t n_batch, int64_t rows_per_unit, bool rowwise, bool colwise) {
  const GroupedQuantizeAttrs attrs{n_batch, rows_per_unit, rowwise, colwise};
  return Enqueue("eqx_quant_grouped_mxfp8_quantize_cuda",
                 PrepareGroupedMxfp8Quantize(x, group_sizes, *row, *row_scale,
                                             *col, *col_scale, attrs),
                 cuda::GroupedMxfp8Quantize, stream);
}

ffi::Error GroupedNvfp4QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer amax,
    ffi::AnyBuffer keys, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    int64_t n_batch, int64_t rows_per_unit, bool rowwise, bool colwise,
    bool use_2d, bool stochastic_rounding) {
  const GroupedQuantizeAttrs attrs{n_batch, rows_per_unit, rowwise,
                                   colwise, use_2d,        stochastic_rounding};
  return Enqueue("eqx_quant_grouped_nvfp4_quantize_cuda",
                 PrepareGroupedNvfp4Quantize(x, amax, keys, group_sizes, *row,
                                             *row_scale, *col, *col_scale,
                                             attrs),
                 cuda::GroupedNvfp4Quantize, stream);
}

ffi::Error GroupedDbiasCudaImpl(cudaStream_t stream, ffi::AnyBuffer x,
                                ffi::AnyBuffer group_sizes,
                                ffi::Result<ffi::AnyBuffer> dbias,
                                int64_t n_batch, int64_t rows_per_unit) {
  return Enqueue(
      "eqx_quant_grouped_dbias_cuda",
      PrepareGroupedDbias(x, group_sizes, *dbias, n_batch, rows_per_unit),
      cuda::GroupedDbias, stream);
}

}  // namespace
}  // namespace eqx_quant

#define EQXQ_CUDA_BIND \
  xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedFp8QuantizeCuda, eqx_quant::GroupedFp8QuantizeCudaImpl,
    eqx_quant::BindGroupedFp8QuantizeOperands(EQXQ_CUDA_BIND),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedMxfp8QuantizeCuda, eqx_quant::GroupedMxfp8QuantizeCudaImpl,
    eqx_quant::BindGroupedMxfp8QuantizeOperands(EQXQ_CUDA_BIND),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedNvfp4QuantizeCuda, eqx_quant::GroupedNvfp4QuantizeCudaImpl,
    eqx_quant::BindGroupedNvfp4QuantizeOperands(EQXQ_CUDA_BIND),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedDbiasCuda, eqx_quant::GroupedDbiasCudaImpl,
    eqx_quant::BindGroupedDbiasOperands(EQXQ_CUDA_BIND),
    {xla::ffi::Traits::kCmdBufferCompatible});

#undef EQXQ_CUDA_BIND
