// XLA FFI handler (CUDA) of eqx_quant_fp8_quantize: validate exactly as on
// CPU, then enqueue the CUDA kernels (kernels/fp8_quantize_cuda.h) on XLA's
// stream. Nothing is allocated and nothing synchronises, so the handler can
// be captured into a CUDA graph (kCmdBufferCompatible).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "common/fp8_quantize_problem.h"
#include "ffi/cuda_launch_error.h"
#include "ffi/fp8_quantize_args.h"
#include "ffi/fp8_quantize_binding.h"
#include "kernels/fp8_quantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

constexpr char kTarget[] = "eqx_quant_fp8_quantize_cuda";

ffi::Error Fp8QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::Buffer<ffi::F32> scale,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> col,
    ffi::ResultBuffer<ffi::F32> scale_inv, ffi::ResultBuffer<ffi::F32> amax,
    ffi::ResultBuffer<ffi::F32> dbias, ffi::Result<ffi::AnyBuffer> dbias_cast,
    Fp8QuantizeAttrs attrs) {
  ffi::ErrorOr<Fp8QuantizeProblem> problem = CheckFp8QuantizeOperands(
      x, scale, *row, *col, *scale_inv, *amax, *dbias, *dbias_cast, attrs);
  if (!problem.has_value()) return problem.error();

  Fp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.scale = scale.typed_data();
  buffers.row = problem->rowwise ? static_cast<uint8_t*>(row->untyped_data())
                                 : nullptr;
  buffers.col = problem->colwise ? static_cast<uint8_t*>(col->untyped_data())
                                 : nullptr;
  buffers.scale_inv = scale_inv->typed_data();
  buffers.amax = amax->typed_data();
  buffers.dbias = problem->with_dbias ? dbias->typed_data() : nullptr;
  buffers.dbias_cast =
      problem->dbias_cast ? dbias_cast->untyped_data() : nullptr;

  const cuda::LaunchStatus status = cuda::Fp8Quantize(*problem, buffers, stream);
  if (status.ok) return ffi::Error::Success();
  if (status.invalid_argument) {
    return CudaLaunchError(kTarget, status.what, 0,
                           ffi::ErrorCode::kInvalidArgument);
  }
  return CudaLaunchError(kTarget, status.what, status.cuda_error,
                         ffi::ErrorCode::kInternal);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Fp8QuantizeCuda, eqx_quant::Fp8QuantizeCudaImpl,
    eqx_quant::BindFp8QuantizeOperands(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
