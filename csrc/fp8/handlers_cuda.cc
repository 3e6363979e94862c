// XLA FFI handler (CUDA) of eqx_quant_fp8_quantize: the preamble exactly as
// on CPU (fp8/args.h), then the CUDA kernels (fp8/quantize_cuda.h) enqueued on
// XLA's stream. Nothing is allocated and nothing synchronises, so the handler
// can be captured into a CUDA graph (kCmdBufferCompatible).

#include <cuda_runtime_api.h>

#include "common/fp8_quantize_problem.h"
#include "ffi/cuda_launch_error.h"
#include "ffi/handler_preamble.h"
#include "fp8/args.h"
#include "fp8/binding.h"
#include "fp8/quantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

// A problem the kernels do not take is an invalid argument; a failed CUDA
// call is internal.
ffi::Error ToError(const cuda::LaunchStatus& status) {
  return LaunchStatusError("eqx_quant_fp8_quantize_cuda", status,
                           status.invalid_argument
                               ? ffi::ErrorCode::kInvalidArgument
                               : ffi::ErrorCode::kInternal);
}

ffi::Error Fp8QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::Buffer<ffi::F32> scale,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> col,
    ffi::ResultBuffer<ffi::F32> scale_inv, ffi::ResultBuffer<ffi::F32> amax,
    ffi::ResultBuffer<ffi::F32> dbias, ffi::Result<ffi::AnyBuffer> dbias_cast,
    Fp8QuantizeAttrs attrs) {
  return EnqueueCudaKernel(
      PrepareFp8Quantize(x, scale, *row, *col, *scale_inv, *amax, *dbias,
                         *dbias_cast, attrs),
      cuda::Fp8Quantize, stream, ToError);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Fp8QuantizeCuda, eqx_quant::Fp8QuantizeCudaImpl,
    eqx_quant::BindFp8QuantizeOperands(eqx_quant::BindCudaStream()),
    {xla::ffi::Traits::kCmdBufferCompatible});
