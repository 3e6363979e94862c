// XLA FFI handler (CUDA) of eqx_quant_mxfp8_quantize: validate exactly as on
// CPU (ffi/mxfp8_quantize_args.h), then enqueue the CUDA kernels
// (kernels/mxfp8_quantize_cuda.h) on XLA's stream. Nothing is allocated and
// nothing synchronises, so the handler can be captured into a CUDA graph
// (kCmdBufferCompatible).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "common/mxfp8_problem.h"
#include "ffi/mxfp8_quantize_args.h"
#include "ffi/mxfp8_quantize_binding.h"
#include "kernels/mxfp8_quantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

constexpr char kTarget[] = "eqx_quant_mxfp8_quantize_cuda";

ffi::Error Mxfp8QuantizeCudaImpl(cudaStream_t stream, ffi::AnyBuffer x,
                                 ffi::Result<ffi::AnyBuffer> row,
                                 ffi::Result<ffi::AnyBuffer> row_scale,
                                 ffi::Result<ffi::AnyBuffer> col,
                                 ffi::Result<ffi::AnyBuffer> col_scale,
                                 int64_t block_axis, bool rowwise,
                                 bool colwise) {
  const Mxfp8QuantizeAttrs attrs{block_axis, rowwise, colwise};
  ffi::ErrorOr<Mxfp8QuantizeProblem> problem = CheckMxfp8QuantizeOperands(
      x, *row, *row_scale, *col, *col_scale, attrs);
  if (!problem.has_value()) return problem.error();

  Mxfp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  if (problem->rowwise) {
    buffers.row = static_cast<uint8_t*>(row->untyped_data());
    buffers.row_scale = static_cast<uint8_t*>(row_scale->untyped_data());
  }
  if (problem->colwise) {
    buffers.col = static_cast<uint8_t*>(col->untyped_data());
    buffers.col_scale = static_cast<uint8_t*>(col_scale->untyped_data());
  }

  const cuda::Mxfp8LaunchStatus status =
      cuda::Mxfp8Quantize(*problem, buffers, stream);
  if (status.ok) return ffi::Error::Success();
  const cudaError_t error = static_cast<cudaError_t>(status.cuda_error);
  if (error == cudaSuccess) {
    return ffi::Error::Internal(std::string(kTarget) + ": " + status.what);
  }
  return ffi::Error::Internal(std::string(kTarget) + ": " + status.what +
                              " failed: " + cudaGetErrorName(error) + ": " +
                              cudaGetErrorString(error));
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Mxfp8QuantizeCuda, eqx_quant::Mxfp8QuantizeCudaImpl,
    eqx_quant::BindMxfp8QuantizeOperands(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
