// The common tail of every CUTLASS launch: check, initialize and run a device
// GEMM (a cutlass::gemm::device::GemmUniversalAdapter) on a stream, each
// failure a GemmStatus naming the step. Included by .cu files only.

#ifndef EQX_QUANT_CSRC_GEMM_CUTLASS_RUN_CUDA_CUH_
#define EQX_QUANT_CSRC_GEMM_CUTLASS_RUN_CUDA_CUH_

#include <cuda_runtime.h>

#include <cstddef>

#include "cutlass/cutlass.h"
#include "gemm/gemm_status.h"

namespace eqx_quant::cuda {

// `workspace` holds Gemm::get_workspace_size(args) bytes (may be null when that is 0).
template <typename Gemm>
GemmStatus RunCutlass(const typename Gemm::Arguments& args, void* workspace,
                      cudaStream_t stream) {
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    return {false, 0, "CUTLASS cannot run this problem (M, N, K or alignment)"};
  }
  if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess) {
    return {false, static_cast<int>(cudaGetLastError()), "CUTLASS initialize"};
  }
  if (gemm.run(stream) != cutlass::Status::kSuccess) {
    return {false, static_cast<int>(cudaGetLastError()), "CUTLASS run"};
  }
  if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
    return {false, static_cast<int>(error), "the CUTLASS kernel launch"};
  }
  return {};
}

// The same with the workspace taken from the caller's scratch allocator.
template <typename Gemm>
GemmStatus RunCutlass(const typename Gemm::Arguments& args, DeviceScratch scratch,
                      cudaStream_t stream) {
  void* workspace = nullptr;
  if (const size_t bytes = Gemm::get_workspace_size(args); bytes > 0) {
    workspace = scratch.allocate(scratch.context, bytes);
    if (workspace == nullptr) return {false, 0, "scratch allocation of the GEMM workspace"};
  }
  return RunCutlass<Gemm>(args, workspace, stream);
}

}  // namespace eqx_quant::cuda

#endif  // EQX_QUANT_CSRC_GEMM_CUTLASS_RUN_CUDA_CUH_
