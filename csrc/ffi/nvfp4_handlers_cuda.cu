// XLA FFI handlers (CUDA) of eqx_quant_nvfp4_amax and eqx_quant_nvfp4_quantize:
// validate exactly as on CPU (ffi/nvfp4_quantize_args.h), then enqueue the
// CUDA kernels (kernels/nvfp4_quantize_cuda.h) on XLA's stream. Nothing is
// allocated and nothing synchronises, so the handlers can be captured into a
// CUDA graph (kCmdBufferCompatible).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "common/nvfp4_problem.h"
#include "ffi/cuda_launch_error.h"
#include "ffi/nvfp4_binding.h"
#include "ffi/nvfp4_quantize_args.h"
#include "kernels/nvfp4_quantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error ToError(const char* target, const cuda::Nvfp4LaunchStatus& status) {
  if (status.ok) return ffi::Error::Success();
  return CudaLaunchError(target, status.what, status.cuda_error,
                         ffi::ErrorCode::kInvalidArgument);
}

ffi::Error Nvfp4AmaxCudaImpl(cudaStream_t stream, ffi::AnyBuffer x,
                             ffi::Result<ffi::AnyBuffer> amax,
                             ffi::Result<ffi::AnyBuffer> rht_amax,
                             int64_t n_batch, int64_t block_axis,
                             bool with_rht, int64_t rht_sign_mask) {
  const Nvfp4AmaxAttrs attrs{n_batch, block_axis, with_rht, rht_sign_mask};
  ffi::ErrorOr<Nvfp4AmaxProblem> problem =
      CheckNvfp4AmaxOperands(x, *amax, *rht_amax, attrs);
  if (!problem.has_value()) return problem.error();

  Nvfp4AmaxBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.amax = static_cast<float*>(amax->untyped_data());
  if (problem->with_rht) {
    buffers.rht_amax = static_cast<float*>(rht_amax->untyped_data());
  }
  return ToError("eqx_quant_nvfp4_amax_cuda",
                 cuda::Nvfp4Amax(*problem, buffers, stream));
}

ffi::Error Nvfp4QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer amax,
    ffi::AnyBuffer col_amax, ffi::AnyBuffer key, ffi::AnyBuffer offset,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    int64_t n_batch, int64_t block_axis, bool rowwise, bool colwise,
    bool use_2d, bool use_rht, int64_t rht_sign_mask, bool stochastic_rounding,
    ffi::Span<const int64_t> global_shape) {
  const Nvfp4QuantizeAttrs attrs{n_batch, block_axis,    rowwise,
                                 colwise, use_2d,        use_rht,
                                 rht_sign_mask, stochastic_rounding,
                                 global_shape};
  ffi::ErrorOr<Nvfp4QuantizeProblem> problem = CheckNvfp4QuantizeOperands(
      x, amax, col_amax, key, offset, *row, *row_scale, *col, *col_scale,
      attrs);
  if (!problem.has_value()) return problem.error();

  Nvfp4QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.amax = static_cast<const float*>(amax.untyped_data());
  buffers.col_amax = static_cast<const float*>(col_amax.untyped_data());
  buffers.key = static_cast<const uint32_t*>(key.untyped_data());
  buffers.offset = static_cast<const int32_t*>(offset.untyped_data());
  if (problem->rowwise) {
    buffers.row = static_cast<uint8_t*>(row->untyped_data());
    buffers.row_scale = static_cast<uint8_t*>(row_scale->untyped_data());
  }
  if (problem->colwise) {
    buffers.col = static_cast<uint8_t*>(col->untyped_data());
    buffers.col_scale = static_cast<uint8_t*>(col_scale->untyped_data());
  }
  return ToError("eqx_quant_nvfp4_quantize_cuda",
                 cuda::Nvfp4Quantize(*problem, buffers, stream));
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Nvfp4AmaxCuda, eqx_quant::Nvfp4AmaxCudaImpl,
    eqx_quant::BindNvfp4AmaxOperands(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Nvfp4QuantizeCuda, eqx_quant::Nvfp4QuantizeCudaImpl,
    eqx_quant::BindNvfp4QuantizeOperands(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
