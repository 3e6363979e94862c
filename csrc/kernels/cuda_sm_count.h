// The multiprocessor count of the current CUDA device, which every launcher
// sizes its grid by. Included by .cu files only.

#ifndef EQX_QUANT_CSRC_KERNELS_CUDA_SM_COUNT_H_
#define EQX_QUANT_CSRC_KERNELS_CUDA_SM_COUNT_H_

#include <cuda_runtime.h>

namespace eqx_quant::cuda {

// Multiprocessors of the current device (cached per device; 132, an H100 /
// H200, if the query fails, whose error is then cleared).
inline int SmCount() {
  static int cached[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 132;
  }
  if (device >= 0 && device < 64 && cached[device] > 0) return cached[device];
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess ||
      sms <= 0) {
    cudaGetLastError();
    sms = 132;
  }
  if (device >= 0 && device < 64) cached[device] = sms;
  return sms;
}

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_KERNELS_CUDA_SM_COUNT_H_
