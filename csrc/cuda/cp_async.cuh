// Asynchronous global -> shared copies (cp.async, sm_80+), shared by the
// CUDA kernels that stage their input in shared memory: the MXFP8 and NVFP4
// tile kernels, the grouped MXFP8 kernel, RowHalfKernel and
// DbiasCurrentCastKernel. Included by .cu files only.
//
// A thread that reads back only the slots it copied itself needs no barrier:
// cp.async.wait_group makes its own completed copies visible to it.

#ifndef EQX_QUANT_CSRC_CUDA_CP_ASYNC_CUH_
#define EQX_QUANT_CSRC_CUDA_CP_ASYNC_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace eqx_quant::cuda {

// 16 bytes global -> shared, not kept in L1; zero-filled (nothing read) when
// !valid (`src` then only needs to be some valid address).
__device__ __forceinline__ void AsyncCopy16(void* dst, const void* src,
                                            bool valid) {
  const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared),
               "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// The same with an L2 eviction policy (createpolicy).
__device__ __forceinline__ void AsyncCopy16(void* dst, const void* src,
                                            bool valid, uint64_t policy) {
  const unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile(
      "cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(
          shared),
      "l"(src), "r"(valid ? 16 : 0), "l"(policy)
      : "memory");
}

// Closes this thread's group of copies issued since the last commit.
__device__ __forceinline__ void AsyncCommit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most kPending committed groups of this thread are pending.
template <int kPending>
__device__ __forceinline__ void AsyncWaitGroup() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_CUDA_CP_ASYNC_CUH_
