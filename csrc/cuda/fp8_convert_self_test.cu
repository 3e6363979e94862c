// Self-test of the hardware FP8 convert (cuda/fp8_convert.cuh's
// CvtPair, used by every FP8 kernel) against common/fp8_format.h's
// FloatToFp8 on all 2^32 f32 inputs, exported for tests/cuda/test_cuda_fp8.py.

#include <cuda_runtime.h>

#include <cstdint>

#include "common/fp8_format.h"
#include "cuda/fp8_convert.cuh"
#include "cuda/sm_count.h"

namespace eqx_quant::cuda {
namespace {

__global__ void Fp8ConvertSelfTestKernel(unsigned long long* mismatches,
                                         unsigned int* first_bad) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < (uint64_t{1} << 32); i += stride) {
    const uint32_t bits = static_cast<uint32_t>(i);
    const float value = __uint_as_float(bits);
    const float other = -value;  // the second lane of each pair
    const uint32_t hw_e4m3 = CvtPair<Fp8Format::kE4M3Fn>(value, other);
    const uint32_t sw_e4m3 =
        FloatToE4M3Fn(value) | (static_cast<uint32_t>(FloatToE4M3Fn(other)) << 8);
    const uint32_t hw_e5m2 = CvtPair<Fp8Format::kE5M2>(value, other);
    const uint32_t sw_e5m2 =
        FloatToE5M2(value) | (static_cast<uint32_t>(FloatToE5M2(other)) << 8);
    if (hw_e4m3 != sw_e4m3 || hw_e5m2 != sw_e5m2) {
      atomicAdd(mismatches, 1ull);
      atomicMin(first_bad, bits);
    }
  }
}

}  // namespace
}  // namespace eqx_quant::cuda

// Runs the hardware FP8 convert and fp8_format.h's FloatToFp8 on all 2^32 f32
// bit patterns (each paired with its negation), for e4m3fn and e5m2. Writes
// the number of differing pairs and the smallest differing input's bits
// (0xFFFFFFFF if none). Returns the cudaError_t (0 = success). Allocates, so
// it is for tests only, never inside an XLA computation.
extern "C" int EqxQuantCudaFp8ConvertSelfTest(unsigned long long* mismatches,
                                              unsigned int* first_bad_bits) {
  unsigned long long* d_mismatches = nullptr;
  unsigned int* d_first = nullptr;
  cudaStream_t stream = nullptr;
  cudaError_t error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (error == cudaSuccess) error = cudaMalloc(&d_mismatches, sizeof(*d_mismatches));
  if (error == cudaSuccess) error = cudaMalloc(&d_first, sizeof(*d_first));
  if (error == cudaSuccess) {
    error = cudaMemsetAsync(d_mismatches, 0, sizeof(*d_mismatches), stream);
  }
  if (error == cudaSuccess) {
    error = cudaMemsetAsync(d_first, 0xFF, sizeof(*d_first), stream);
  }
  if (error == cudaSuccess) {
    eqx_quant::cuda::Fp8ConvertSelfTestKernel<<<eqx_quant::cuda::SmCount() * 8, 256, 0,
                               stream>>>(d_mismatches, d_first);
    error = cudaGetLastError();
  }
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(mismatches, d_mismatches, sizeof(*mismatches),
                            cudaMemcpyDeviceToHost, stream);
  }
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(first_bad_bits, d_first, sizeof(*first_bad_bits),
                            cudaMemcpyDeviceToHost, stream);
  }
  if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
  if (d_mismatches != nullptr) cudaFree(d_mismatches);
  if (d_first != nullptr) cudaFree(d_first);
  if (stream != nullptr) cudaStreamDestroy(stream);
  return static_cast<int>(error);
}