// XLA FFI handler of eqx_quant_mxfp8_dequantize_cuda (mxfp8/dequantize_cuda.h):
//
//   Arg 0  data    F8E4M3FN | F8E5M2   (A, L, B)
//   Arg 1  scales  U8                  (A, ceil(L/32), B)
//   Ret 0  out     BF16 | F32          (A, L, B)

#include <cstdint>
#include <string>

#include "common/fp8_format.h"
#include "ffi/cuda_launch_error.h"
#include "mxfp8/dequantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

constexpr const char* kTarget = "eqx_quant_mxfp8_dequantize_cuda";

ffi::Error Invalid(const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(kTarget) + ": " + what);
}

bool HasDims(ffi::AnyBuffer::Dimensions dims, int64_t d0, int64_t d1, int64_t d2) {
  return dims.size() == 3 && dims[0] == d0 && dims[1] == d1 && dims[2] == d2;
}

ffi::Error Mxfp8DequantizeCudaImpl(cudaStream_t stream, ffi::AnyBuffer data,
                                   ffi::AnyBuffer scales, ffi::Result<ffi::AnyBuffer> out) {
  if (data.dimensions().size() != 3) return Invalid("data must be 3-D (A, L, B)");
  cuda::Mxfp8DequantizeProblem p;
  if (data.element_type() == ffi::DataType::F8E4M3FN) {
    p.format = Fp8Format::kE4M3Fn;
  } else if (data.element_type() == ffi::DataType::F8E5M2) {
    p.format = Fp8Format::kE5M2;
  } else {
    return Invalid("data must be F8E4M3FN or F8E5M2");
  }
  p.a = data.dimensions()[0];
  p.l = data.dimensions()[1];
  p.b = data.dimensions()[2];
  if (scales.element_type() != ffi::DataType::U8 ||
      !HasDims(scales.dimensions(), p.a, (p.l + 31) / 32, p.b)) {
    return Invalid("scales must be U8 (A, ceil(L/32), B)");
  }
  if (out->element_type() != ffi::DataType::BF16 && out->element_type() != ffi::DataType::F32) {
    return Invalid("out must be BF16 or F32");
  }
  if (!HasDims(out->dimensions(), p.a, p.l, p.b)) return Invalid("out must be (A, L, B)");
  p.out_f32 = out->element_type() == ffi::DataType::F32;
  p.data = static_cast<const uint8_t*>(data.untyped_data());
  p.scales = static_cast<const uint8_t*>(scales.untyped_data());
  p.out = out->untyped_data();
  const int error = cuda::Mxfp8Dequantize(p, stream);
  if (error == 0) return ffi::Error::Success();
  return CudaLaunchError(kTarget, "decode launch", error, ffi::ErrorCode::kInternal);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(Mxfp8DequantizeCuda, eqx_quant::Mxfp8DequantizeCudaImpl,
                              eqx_quant::BindCudaStream()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
