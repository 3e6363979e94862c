// What the CUDA handlers share besides the preamble: the binding of XLA's
// CUDA stream, and the FFI error of a CUDA launch sequence that did not
// succeed: "<target>: <what>" when no CUDA call failed (the problem is
// outside what the kernels do; the caller picks the error code), else
// "<target>: <what> failed: <CUDA error name>: <CUDA error text>" (Internal).

#ifndef EQX_QUANT_CSRC_FFI_CUDA_LAUNCH_ERROR_H_
#define EQX_QUANT_CSRC_FFI_CUDA_LAUNCH_ERROR_H_

#include <cuda_runtime_api.h>

#include <string>

#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// Ffi::Bind() with XLA's CUDA stream as the context parameter: pass it to a
// family's Bind<Op>Operands for the CUDA handler.
inline auto BindCudaStream() {
  return xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>();
}

// cuda_error: the cudaError_t as int (0: no CUDA call failed).
inline xla::ffi::Error CudaLaunchError(const char* target, const char* what,
                                       int cuda_error,
                                       xla::ffi::ErrorCode without_cuda_error) {
  const cudaError_t error = static_cast<cudaError_t>(cuda_error);
  if (error == cudaSuccess) {
    return xla::ffi::Error(without_cuda_error,
                           std::string(target) + ": " + what);
  }
  return xla::ffi::Error::Internal(std::string(target) + ": " + what +
                                   " failed: " + cudaGetErrorName(error) +
                                   ": " + cudaGetErrorString(error));
}

// The error of a launcher's status (any status struct with ok, cuda_error and
// what): success, or CudaLaunchError with `without_cuda_error`.
template <typename Status>
xla::ffi::Error LaunchStatusError(const char* target, const Status& status,
                                  xla::ffi::ErrorCode without_cuda_error) {
  if (status.ok) return xla::ffi::Error::Success();
  return CudaLaunchError(target, status.what, status.cuda_error,
                         without_cuda_error);
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_CUDA_LAUNCH_ERROR_H_
