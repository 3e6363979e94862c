// XLA FFI handler of eqx_quant_nvfp4_dequantize_cuda (nvfp4/dequantize_cuda.h):
//
//   Arg 0  codes          F4E2M1FN   (A, L)          packed two per byte
//   Arg 1  scales         U8         (A, ceil(L/16))
//   Arg 2  decode_scales  F32        (E,)            E divides A
//   Ret 0  out            BF16 | F32 (A, L)

#include <cstdint>
#include <string>

#include "ffi/cuda_launch_error.h"
#include "nvfp4/dequantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

constexpr const char* kTarget = "eqx_quant_nvfp4_dequantize_cuda";

ffi::Error Invalid(const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(kTarget) + ": " + what);
}

ffi::Error Nvfp4DequantizeCudaImpl(cudaStream_t stream, ffi::AnyBuffer codes,
                                   ffi::AnyBuffer scales, ffi::AnyBuffer decode_scales,
                                   ffi::Result<ffi::AnyBuffer> out) {
  const auto dims = codes.dimensions();
  if (codes.element_type() != ffi::DataType::F4E2M1FN || dims.size() != 2) {
    return Invalid("codes must be F4E2M1FN (A, L)");
  }
  cuda::Nvfp4DequantizeProblem p;
  p.rows = dims[0];
  p.cols = dims[1];
  const auto s = scales.dimensions();
  if (scales.element_type() != ffi::DataType::U8 || s.size() != 2 || s[0] != p.rows ||
      s[1] != (p.cols + 15) / 16) {
    return Invalid("scales must be U8 (A, ceil(L/16))");
  }
  const auto e = decode_scales.dimensions();
  if (decode_scales.element_type() != ffi::DataType::F32 || e.size() != 1 || e[0] < 1 ||
      p.rows % e[0] != 0) {
    return Invalid("decode_scales must be F32 (E,) with E >= 1 dividing A");
  }
  p.examples = e[0];
  const auto o = out->dimensions();
  if ((out->element_type() != ffi::DataType::BF16 &&
       out->element_type() != ffi::DataType::F32) ||
      o.size() != 2 || o[0] != p.rows || o[1] != p.cols) {
    return Invalid("out must be BF16 or F32 (A, L)");
  }
  p.out_f32 = out->element_type() == ffi::DataType::F32;
  p.codes = static_cast<const uint8_t*>(codes.untyped_data());
  p.scales = static_cast<const uint8_t*>(scales.untyped_data());
  p.decode_scales = static_cast<const float*>(decode_scales.untyped_data());
  p.out = out->untyped_data();
  const int error = cuda::Nvfp4Dequantize(p, stream);
  if (error == 0) return ffi::Error::Success();
  return CudaLaunchError(kTarget, "decode launch", error, ffi::ErrorCode::kInternal);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(Nvfp4DequantizeCuda, eqx_quant::Nvfp4DequantizeCudaImpl,
                              eqx_quant::BindCudaStream()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>());
