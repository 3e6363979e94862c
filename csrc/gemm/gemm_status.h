// What the GEMM launchers return, and the device memory they may ask the
// caller for. Free of CUDA, CUTLASS and XLA types.

#ifndef EQX_QUANT_CSRC_GEMM_GEMM_STATUS_H_
#define EQX_QUANT_CSRC_GEMM_GEMM_STATUS_H_

#include <cstddef>

namespace eqx_quant::cuda {

// A launch's outcome: ok, or what failed and the CUDA error it left (0 if none).
struct GemmStatus {
  bool ok = true;
  int cuda_error = 0;  // cudaError_t of the failing call
  const char* what = "";
};

// Device memory for one call, handed out by the caller (XLA's scratch
// allocator); null when it cannot.
struct DeviceScratch {
  void* (*allocate)(void* context, size_t bytes);
  void* context;
};

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_GEMM_GEMM_STATUS_H_
