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
#include "ffi/grouped_args.h"
#include "ffi/grouped_binding.h"
#include "kernels/grouped_quantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

template <typename T>
T* Data(ffi::Result<ffi::AnyBuffer>& buffer) {
  return static_cast<T*>(buffer->untyped_data());
}

template <typename T>
const T* Data(const ffi::AnyBuffer& buffer) {
  return static_cast<const T*>(buffer.untyped_data());
}

ffi::Error ToError(const char* target,
                   const cuda::GroupedLaunchStatus& status) {
  if (status.ok) return ffi::Error::Success();
  const cudaError_t error = static_cast<cudaError_t>(status.cuda_error);
  if (error == cudaSuccess) {  // the problem is outside what the kernels do
    return ffi::Error::InvalidArgument(std::string(target) + ": " +
                                       status.what);
  }
  return ffi::Error::Internal(std::string(target) + ": " + status.what +
                              " failed: " + cudaGetErrorName(error) + ": " +
                              cudaGetErrorString(error));
}

ffi::Error GroupedFp8QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale,
    ffi::AnyBuffer group_sizes, ffi::Result<ffi::AnyBuffer> row,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> scale_inv,
    ffi::Result<ffi::AnyBuffer> amax, int64_t n_batch, int64_t rows_per_unit,
    bool rowwise, bool colwise) {
  GroupedQuantizeAttrs attrs;
  attrs.n_batch = n_batch;
  attrs.rows_per_unit = rows_per_unit;
  attrs.rowwise = rowwise;
  attrs.colwise = colwise;
  ffi::ErrorOr<GroupedFp8QuantizeProblem> problem =
      CheckGroupedFp8QuantizeOperands(x, scale, group_sizes, *row, *col,
                                      *scale_inv, *amax, attrs);
  if (!problem.has_value()) return problem.error();

  GroupedFp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.scale = Data<float>(scale);
  buffers.group_sizes = Data<int32_t>(group_sizes);
  buffers.row = problem->rowwise ? Data<uint8_t>(row) : nullptr;
  buffers.col = problem->colwise ? Data<uint8_t>(col) : nullptr;
  buffers.scale_inv = Data<float>(scale_inv);
  buffers.amax = Data<float>(amax);
  return ToError("eqx_quant_grouped_fp8_quantize_cuda",
                 cuda::GroupedFp8Quantize(*problem, buffers, stream));
}

ffi::Error GroupedMxfp8QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    int64_t n_batch, int64_t rows_per_unit, bool rowwise, bool colwise) {
  GroupedQuantizeAttrs attrs;
  attrs.n_batch = n_batch;
  attrs.rows_per_unit = rows_per_unit;
  attrs.rowwise = rowwise;
  attrs.colwise = colwise;
  ffi::ErrorOr<GroupedMxfp8QuantizeProblem> problem =
      CheckGroupedMxfp8QuantizeOperands(x, group_sizes, *row, *row_scale, *col,
                                        *col_scale, attrs);
  if (!problem.has_value()) return problem.error();

  GroupedMxfp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.group_sizes = Data<int32_t>(group_sizes);
  if (problem->rowwise) {
    buffers.row = Data<uint8_t>(row);
    buffers.row_scale = Data<uint8_t>(row_scale);
  }
  if (problem->colwise) {
    buffers.col = Data<uint8_t>(col);
    buffers.col_scale = Data<uint8_t>(col_scale);
  }
  return ToError("eqx_quant_grouped_mxfp8_quantize_cuda",
                 cuda::GroupedMxfp8Quantize(*problem, buffers, stream));
}

ffi::Error GroupedNvfp4QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer amax,
    ffi::AnyBuffer keys, ffi::AnyBuffer group_sizes,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    int64_t n_batch, int64_t rows_per_unit, bool rowwise, bool colwise,
    bool use_2d, bool stochastic_rounding) {
  GroupedQuantizeAttrs attrs;
  attrs.n_batch = n_batch;
  attrs.rows_per_unit = rows_per_unit;
  attrs.rowwise = rowwise;
  attrs.colwise = colwise;
  attrs.use_2d = use_2d;
  attrs.stochastic_rounding = stochastic_rounding;
  ffi::ErrorOr<GroupedNvfp4QuantizeProblem> problem =
      CheckGroupedNvfp4QuantizeOperands(x, amax, keys, group_sizes, *row,
                                        *row_scale, *col, *col_scale, attrs);
  if (!problem.has_value()) return problem.error();

  GroupedNvfp4QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.amax = Data<float>(amax);
  buffers.keys = Data<uint32_t>(keys);
  buffers.group_sizes = Data<int32_t>(group_sizes);
  if (problem->rowwise) {
    buffers.row = Data<uint8_t>(row);
    buffers.row_scale = Data<uint8_t>(row_scale);
  }
  if (problem->colwise) {
    buffers.col = Data<uint8_t>(col);
    buffers.col_scale = Data<uint8_t>(col_scale);
  }
  return ToError("eqx_quant_grouped_nvfp4_quantize_cuda",
                 cuda::GroupedNvfp4Quantize(*problem, buffers, stream));
}

ffi::Error GroupedDbiasCudaImpl(cudaStream_t stream, ffi::AnyBuffer x,
                                ffi::AnyBuffer group_sizes,
                                ffi::Result<ffi::AnyBuffer> dbias,
                                int64_t n_batch, int64_t rows_per_unit) {
  ffi::ErrorOr<GroupedDbiasProblem> problem = CheckGroupedDbiasOperands(
      x, group_sizes, *dbias, n_batch, rows_per_unit);
  if (!problem.has_value()) return problem.error();

  GroupedDbiasBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.group_sizes = Data<int32_t>(group_sizes);
  buffers.dbias = Data<float>(dbias);
  return ToError("eqx_quant_grouped_dbias_cuda",
                 cuda::GroupedDbias(*problem, buffers, stream));
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
