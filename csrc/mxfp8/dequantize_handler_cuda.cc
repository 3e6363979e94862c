// XLA FFI handler of eqx_quant_mxfp8_dequantize_cuda (mxfp8/dequantize_cuda.h;
// operands: ffi/dequantize_args.h).

#include "ffi/cuda_launch_error.h"
#include "ffi/dequantize_args.h"
#include "mxfp8/dequantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

constexpr const char* kTarget = "eqx_quant_mxfp8_dequantize_cuda";

ffi::Error Mxfp8DequantizeCudaImpl(cudaStream_t stream, ffi::AnyBuffer data,
                                   ffi::AnyBuffer scales, ffi::Result<ffi::AnyBuffer> out) {
  const ffi::ErrorOr<Mxfp8DequantizeProblem> p =
      PrepareMxfp8Dequantize(kTarget, data, scales, *out);
  if (!p.has_value()) return p.error();
  const int error = cuda::Mxfp8Dequantize(*p, stream);
  if (error == 0) return ffi::Error::Success();
  return CudaLaunchError(kTarget, "decode launch", error, ffi::ErrorCode::kInternal);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(Mxfp8DequantizeCuda, eqx_quant::Mxfp8DequantizeCudaImpl,
                              eqx_quant::BindCudaStream()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
