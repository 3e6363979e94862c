// EQX_QUANT_HOST_DEVICE: __host__ __device__ under nvcc, nothing for the host
// compiler, so that one header's inline functions serve the CPU kernels, the
// host tests and the CUDA kernels. EQX_QUANT_UNROLL: `#pragma unroll` in device
// code of such functions (the host compiler does not know it).

#ifndef EQX_QUANT_CSRC_COMMON_HOST_DEVICE_H_
#define EQX_QUANT_CSRC_COMMON_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define EQX_QUANT_HOST_DEVICE __host__ __device__
#else
#define EQX_QUANT_HOST_DEVICE
#endif

#if defined(__CUDA_ARCH__)
#define EQX_QUANT_UNROLL _Pragma("unroll")
#else
#define EQX_QUANT_UNROLL
#endif

#endif  // EQX_QUANT_CSRC_COMMON_HOST_DEVICE_H_
