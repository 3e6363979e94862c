// XLA FFI handler (CUDA) of eqx_quant_fp8_quantize. The operands are validated
// exactly as on CPU; the CUDA kernels are not written yet, so a valid call
// returns UNIMPLEMENTED.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/fp8_quantize_problem.h"
#include "ffi/fp8_quantize_args.h"
#include "ffi/fp8_quantize_binding.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Fp8QuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::Buffer<ffi::F32> scale,
    ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> col,
    ffi::ResultBuffer<ffi::F32> scale_inv, ffi::ResultBuffer<ffi::F32> amax,
    ffi::ResultBuffer<ffi::F32> dbias, int64_t n_batch, int64_t flatten_axis,
    int64_t dbias_keep, bool rowwise, bool colwise, bool with_dbias) {
  (void)stream;
  const Fp8QuantizeAttrs attrs{n_batch, flatten_axis, dbias_keep,
                               rowwise, colwise,      with_dbias};
  ffi::ErrorOr<Fp8QuantizeProblem> problem = CheckFp8QuantizeOperands(
      x, scale, *row, *col, *scale_inv, *amax, *dbias, attrs);
  if (!problem.has_value()) return problem.error();
  return ffi::Error(ffi::ErrorCode::kUnimplemented,
                    "eqx_quant_fp8_quantize: CUDA kernel not implemented yet");
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Fp8QuantizeCuda, eqx_quant::Fp8QuantizeCudaImpl,
    eqx_quant::BindFp8QuantizeOperands(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
