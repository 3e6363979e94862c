// Attributes of the current CUDA device, cached per device: the
// multiprocessor count, which every launcher sizes its grid by, and the others
// a launcher needs. Included by .cu files only.

#ifndef EQX_QUANT_CSRC_CUDA_SM_COUNT_H_
#define EQX_QUANT_CSRC_CUDA_SM_COUNT_H_

#include <cuda_runtime.h>

namespace eqx_quant::cuda {

// Attribute kAttribute of the current device (cached per device; `fallback`
// if the query fails, whose error is then cleared, or gives <= 0).
template <cudaDeviceAttr kAttribute>
int DeviceAttribute(int fallback) {
  static int cached[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return fallback;
  }
  if (device >= 0 && device < 64 && cached[device] > 0) return cached[device];
  int value = 0;
  if (cudaDeviceGetAttribute(&value, kAttribute, device) != cudaSuccess ||
      value <= 0) {
    cudaGetLastError();
    value = fallback;
  }
  if (device >= 0 && device < 64) cached[device] = value;
  return value;
}

// Multiprocessors of the current device (132, an H100 / H200, if unknown).
inline int SmCount() {
  return DeviceAttribute<cudaDevAttrMultiProcessorCount>(132);
}

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_CUDA_SM_COUNT_H_
