// XLA FFI handler of eqx_quant_grouped_mxfp8_dequantize_cuda
// (grouped/dequantize_cuda.h; operands: ffi/dequantize_args.h).
//
// The groups' first rows and region offsets go to XLA's scratch memory, else
// stream-ordered memory freed on the stream: the host never waits.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>

#include "ffi/cuda_launch_error.h"
#include "ffi/dequantize_args.h"
#include "grouped/dequantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;
constexpr const char* kTarget = "eqx_quant_grouped_mxfp8_dequantize_cuda";

ffi::Error GroupedMxfp8DequantizeCudaImpl(cudaStream_t stream, ffi::ScratchAllocator scratch,
                                          ffi::AnyBuffer data, ffi::AnyBuffer scales,
                                          ffi::AnyBuffer sizes, ffi::Result<ffi::AnyBuffer> out,
                                          int64_t rows_per_unit) {
  ffi::ErrorOr<GroupedMxfp8DequantizeProblem> prepared =
      PrepareGroupedMxfp8Dequantize(kTarget, data, scales, sizes, *out, rows_per_unit);
  if (!prepared.has_value()) return prepared.error();
  GroupedMxfp8DequantizeProblem& p = *prepared;
  const size_t bytes = static_cast<size_t>(2 * (p.groups + 1)) * sizeof(int64_t);
  void* owned = nullptr;
  if (std::optional<void*> got = scratch.Allocate(bytes, 256)) {
    p.layout = static_cast<int64_t*>(*got);
  } else if (cudaMallocAsync(&owned, bytes, stream) == cudaSuccess) {
    p.layout = static_cast<int64_t*>(owned);
  } else {
    cudaGetLastError();
    return ffi::Error::Internal(std::string(kTarget) + ": no memory for the group layout");
  }
  const cuda::GroupedDequantizeStatus status = cuda::GroupedMxfp8DequantizeBf16(p, stream);
  if (owned != nullptr) cudaFreeAsync(owned, stream);
  return LaunchStatusError(kTarget, status, ffi::ErrorCode::kInternal);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedMxfp8DequantizeCuda,
                              eqx_quant::GroupedMxfp8DequantizeCudaImpl,
                              eqx_quant::BindCudaStream()
                                  .Ctx<xla::ffi::ScratchAllocator>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Attr<int64_t>("rows_per_unit"));
