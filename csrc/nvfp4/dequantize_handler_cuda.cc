// XLA FFI handler of eqx_quant_nvfp4_dequantize_cuda (nvfp4/dequantize_cuda.h;
// operands: ffi/dequantize_args.h).

#include "ffi/cuda_launch_error.h"
#include "ffi/dequantize_args.h"
#include "nvfp4/dequantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

constexpr const char* kTarget = "eqx_quant_nvfp4_dequantize_cuda";

ffi::Error Nvfp4DequantizeCudaImpl(cudaStream_t stream, ffi::AnyBuffer codes,
                                   ffi::AnyBuffer scales, ffi::AnyBuffer decode_scales,
                                   ffi::Result<ffi::AnyBuffer> out) {
  const ffi::ErrorOr<Nvfp4DequantizeProblem> p =
      PrepareNvfp4Dequantize(kTarget, codes, scales, decode_scales, *out);
  if (!p.has_value()) return p.error();
  const int error = cuda::Nvfp4Dequantize(*p, stream);
  if (error == 0) return ffi::Error::Success();
  return CudaLaunchError(kTarget, "decode launch", error, ffi::ErrorCode::kInternal);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(Nvfp4DequantizeCuda, eqx_quant::Nvfp4DequantizeCudaImpl,
                              eqx_quant::BindCudaStream()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
