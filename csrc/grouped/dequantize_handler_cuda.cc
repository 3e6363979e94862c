// XLA FFI handler of eqx_quant_grouped_mxfp8_dequantize_cuda
// (grouped/dequantize_cuda.h):
//
//   Arg 0  data    F8E4M3FN | F8E5M2   (R, N)
//   Arg 1  scales  U8                  (L,)  the part's swizzled scale buffer
//   Arg 2  sizes   S32                 (G,)
//   Ret 0  out     BF16                (R, N)
//   Attrs  rows_per_unit: int64
//
// The groups' first rows and region offsets go to XLA's scratch memory, else
// stream-ordered memory freed on the stream: the host never waits.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/fp8_format.h"
#include "common/grouped_layout.h"
#include "ffi/cuda_launch_error.h"
#include "grouped/dequantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;
constexpr const char* kTarget = "eqx_quant_grouped_mxfp8_dequantize_cuda";

ffi::Error Invalid(const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(kTarget) + ": " + what);
}

ffi::Error GroupedMxfp8DequantizeCudaImpl(cudaStream_t stream, ffi::ScratchAllocator scratch,
                                          ffi::AnyBuffer data, ffi::AnyBuffer scales,
                                          ffi::AnyBuffer sizes, ffi::Result<ffi::AnyBuffer> out,
                                          int64_t rows_per_unit) {
  if (data.dimensions().size() != 2) return Invalid("data must be 2-D (R, N)");
  const int64_t rows = data.dimensions()[0], cols = data.dimensions()[1];
  cuda::GroupedMxfp8DequantizeProblem p;
  if (data.element_type() == ffi::DataType::F8E4M3FN) {
    p.format = Fp8Format::kE4M3Fn;
  } else if (data.element_type() == ffi::DataType::F8E5M2) {
    p.format = Fp8Format::kE5M2;
  } else {
    return Invalid("data must be F8E4M3FN or F8E5M2");
  }
  if (sizes.element_type() != ffi::DataType::S32 || sizes.dimensions().size() != 1 ||
      sizes.element_count() == 0) {
    return Invalid("sizes must be S32 (G,) with G >= 1");
  }
  const int64_t groups = static_cast<int64_t>(sizes.element_count());
  if (rows_per_unit < 1 || rows % rows_per_unit != 0) {
    return Invalid("rows_per_unit must be >= 1 and divide R");
  }
  const int64_t needed = grouped::ScaleBufferBytes(grouped::ScalePart::kRowwise, rows, cols,
                                                   groups, grouped::kMxfp8Block);
  if (scales.element_type() != ffi::DataType::U8 ||
      static_cast<int64_t>(scales.element_count()) != needed) {
    return Invalid("scales must be U8 of the rowwise buffer's length " + std::to_string(needed));
  }
  const auto out_dims = out->dimensions();
  if (out->element_type() != ffi::DataType::BF16 || out_dims.size() != 2 ||
      out_dims[0] != rows || out_dims[1] != cols) {
    return Invalid("out must be BF16 (R, N)");
  }
  p.rows = rows;
  p.cols = cols;
  p.groups = groups;
  p.rows_per_unit = rows_per_unit;
  p.data = static_cast<const uint8_t*>(data.untyped_data());
  p.scales = static_cast<const uint8_t*>(scales.untyped_data());
  p.sizes = static_cast<const int32_t*>(sizes.untyped_data());
  p.out = static_cast<uint16_t*>(out->untyped_data());
  const size_t bytes = static_cast<size_t>(2 * (groups + 1)) * sizeof(int64_t);
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
