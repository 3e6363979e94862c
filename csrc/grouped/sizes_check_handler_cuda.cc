// XLA FFI handler (CUDA) of eqx_quant_group_sizes_check (docs/grouped.md,
// "Checks"): the CPU handler's check (grouped/sizes_check.h) on sizes that
// live on the GPU.
//
//   Arg 0  group_sizes  S32   Bt + (G,)
//   Ret 0  out          S32   Bt + (G,)   a copy of group_sizes
//   Attrs  total: int64, fn: string, operand: string
//
// The sizes (a few bytes) are copied to the host and the stream waits for
// them: the check reads values the host does not have, as the host callback
// of the pure-JAX check does. A bad vector fails the call with
// INVALID_ARGUMENT, which XLA puts on the first line of the error that `jit`
// raises. The copy out is stream-ordered.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ffi/cuda_launch_error.h"
#include "grouped/sizes_check.h"
#include "grouped/sizes_check_args.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

constexpr const char* kTarget = "eqx_quant_group_sizes_check_cuda";

ffi::Error CudaFailure(const char* what, cudaError_t error) {
  cudaGetLastError();
  return ffi::Error::Internal(std::string(kTarget) + ": " + what + ": " +
                              cudaGetErrorString(error));
}

ffi::Error GroupSizesCheckCudaImpl(cudaStream_t stream,
                                   ffi::AnyBuffer group_sizes,
                                   ffi::Result<ffi::AnyBuffer> out,
                                   int64_t total, std::string_view fn,
                                   std::string_view operand) {
  ffi::Error invalid = sizes_check::CheckOperands(kTarget, group_sizes, *out);
  if (invalid.failure()) return invalid;
  const int64_t count = static_cast<int64_t>(group_sizes.element_count());
  if (count == 0) return ffi::Error::Success();
  const size_t bytes = static_cast<size_t>(count) * sizeof(int32_t);
  std::vector<int32_t> host(static_cast<size_t>(count));
  cudaError_t error = cudaMemcpyAsync(host.data(), group_sizes.untyped_data(),
                                      bytes, cudaMemcpyDeviceToHost, stream);
  if (error != cudaSuccess) return CudaFailure("copying the sizes", error);
  error = cudaStreamSynchronize(stream);
  if (error != cudaSuccess) return CudaFailure("waiting for the sizes", error);
  const std::string bad = sizes_check::FirstBadExample(
      host.data(), count, group_sizes.dimensions().back(),
      group_sizes.dimensions().size() > 1, total, fn, operand);
  if (!bad.empty()) return ffi::Error::InvalidArgument(bad);
  error = cudaMemcpyAsync(out->untyped_data(), group_sizes.untyped_data(),
                          bytes, cudaMemcpyDeviceToDevice, stream);
  if (error != cudaSuccess) return CudaFailure("copying the result", error);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupSizesCheckCuda,
                              eqx_quant::GroupSizesCheckCudaImpl,
                              eqx_quant::BindCudaStream()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Attr<int64_t>("total")
                                  .Attr<std::string_view>("fn")
                                  .Attr<std::string_view>("operand"));
