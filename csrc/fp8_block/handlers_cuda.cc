// XLA FFI handler (CUDA) of eqx_quant_fp8_block_quantize: the preamble exactly
// as on CPU (fp8_block/args.h), then the tile kernel on XLA's stream. Nothing
// is allocated and nothing synchronises (kCmdBufferCompatible).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/fp8_block_problem.h"
#include "ffi/cuda_launch_error.h"
#include "ffi/handler_preamble.h"
#include "fp8_block/args.h"
#include "fp8_block/binding.h"
#include "fp8_block/quantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error ToError(const cuda::Fp8BlockLaunchStatus& status) {
  return LaunchStatusError("eqx_quant_fp8_block_quantize_cuda", status,
                           ffi::ErrorCode::kInternal);
}

ffi::Error Fp8BlockQuantizeCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> row,
    ffi::Result<ffi::AnyBuffer> row_scale, ffi::Result<ffi::AnyBuffer> col,
    ffi::Result<ffi::AnyBuffer> col_scale, Fp8BlockQuantizeAttrs attrs) {
  return EnqueueCudaKernel(
      PrepareFp8BlockQuantize(x, *row, *row_scale, *col, *col_scale, attrs),
      cuda::Fp8BlockQuantize, stream, ToError);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Fp8BlockQuantizeCuda, eqx_quant::Fp8BlockQuantizeCudaImpl,
    eqx_quant::BindFp8BlockQuantizeOperands(eqx_quant::BindCudaStream()),
    {xla::ffi::Traits::kCmdBufferCompatible});
