// XLA FFI handlers (CUDA) of eqx_quant_nvfp4_amax and eqx_quant_nvfp4_quantize:
// the preamble exactly as on CPU (nvfp4/args.h), then the CUDA kernels
// (nvfp4/quantize_cuda.h) enqueued on XLA's stream. Nothing is allocated and
// nothing synchronises, so the handlers can be captured into a CUDA graph
// (kCmdBufferCompatible).

#include <cuda_runtime_api.h>

#include "common/nvfp4_problem.h"
#include "ffi/cuda_launch_error.h"
#include "ffi/handler_preamble.h"
#include "nvfp4/args.h"
#include "nvfp4/binding.h"
#include "nvfp4/quantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

// The error of a launch status of `target`. A failure that is not a CUDA
// error is a problem outside what the kernels take (e.g. a rank above the
// stochastic-rounding limit): an invalid argument.
auto ToError(const char* target) {
  return [target](const cuda::Nvfp4LaunchStatus& status) {
    return LaunchStatusError(target, status, ffi::ErrorCode::kInvalidArgument);
  };
}

ffi::Error Nvfp4AmaxCudaImpl(cudaStream_t stream, ffi::AnyBuffer x,
                             ffi::Result<ffi::AnyBuffer> amax,
                             ffi::Result<ffi::AnyBuffer> rht_amax,
                             Nvfp4AmaxAttrs attrs) {
  return EnqueueCudaKernel(PrepareNvfp4Amax(x, *amax, *rht_amax, attrs),
                           cuda::Nvfp4Amax, stream,
                           ToError("eqx_quant_nvfp4_amax_cuda"));
}

ffi::Error Nvfp4QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer amax,
    ffi::AnyBuffer col_amax, ffi::AnyBuffer key, ffi::AnyBuffer offset,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> row_scale,
    ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> col_scale,
    Nvfp4QuantizeAttrs attrs) {
  return EnqueueCudaKernel(
      PrepareNvfp4Quantize(x, amax, col_amax, key, offset, *row, *row_scale,
                           *col, *col_scale, attrs),
      cuda::Nvfp4Quantize, stream,
      ToError("eqx_quant_nvfp4_quantize_cuda"));
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Nvfp4AmaxCuda, eqx_quant::Nvfp4AmaxCudaImpl,
    eqx_quant::BindNvfp4AmaxOperands(eqx_quant::BindCudaStream()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Nvfp4QuantizeCuda, eqx_quant::Nvfp4QuantizeCudaImpl,
    eqx_quant::BindNvfp4QuantizeOperands(eqx_quant::BindCudaStream()),
    {xla::ffi::Traits::kCmdBufferCompatible});
