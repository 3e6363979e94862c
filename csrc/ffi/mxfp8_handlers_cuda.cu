// XLA FFI handler (CUDA) of eqx_quant_mxfp8_quantize: validate exactly as on
// CPU (ffi/mxfp8_quantize_args.h), then enqueue the CUDA kernels
// (kernels/mxfp8_quantize_cuda.h) on XLA's stream. Nothing is allocated and
// nothing synchronises, so the handler can be captured into a CUDA graph
// (kCmdBufferCompatible).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "common/fp8_quantize_problem.h"
#include "common/mxfp8_problem.h"
#include "ffi/cuda_launch_error.h"
#include "ffi/mxfp8_quantize_args.h"
#include "ffi/mxfp8_quantize_binding.h"
#include "kernels/fp8_quantize_cuda.h"
#include "kernels/mxfp8_quantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

constexpr char kTarget[] = "eqx_quant_mxfp8_quantize_cuda";

ffi::Error Failure(const char* what, int cuda_error) {
  return CudaLaunchError(kTarget, what, cuda_error, ffi::ErrorCode::kInternal);
}

ffi::Error Mxfp8QuantizeCudaImpl(cudaStream_t stream, ffi::AnyBuffer x,
                                 ffi::Result<ffi::AnyBuffer> row,
                                 ffi::Result<ffi::AnyBuffer> row_scale,
                                 ffi::Result<ffi::AnyBuffer> col,
                                 ffi::Result<ffi::AnyBuffer> col_scale,
                                 ffi::ResultBuffer<ffi::F32> dbias_nodes,
                                 ffi::Result<ffi::AnyBuffer> dbias_cast,
                                 Mxfp8QuantizeAttrs attrs) {
  Fp8QuantizeProblem dbias;
  ffi::ErrorOr<Mxfp8QuantizeProblem> problem = CheckMxfp8QuantizeOperands(
      x, *row, *row_scale, *col, *col_scale, *dbias_nodes, *dbias_cast, attrs,
      &dbias);
  if (!problem.has_value()) return problem.error();
  Mxfp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  if (problem->rowwise) {
    buffers.row = static_cast<uint8_t*>(row->untyped_data());
    buffers.row_scale = static_cast<uint8_t*>(row_scale->untyped_data());
  }
  if (problem->colwise) {
    buffers.col = static_cast<uint8_t*>(col->untyped_data());
    buffers.col_scale = static_cast<uint8_t*>(col_scale->untyped_data());
  }
  if (!dbias.with_dbias) {
    const cuda::Mxfp8LaunchStatus status =
        cuda::Mxfp8Quantize(*problem, buffers, stream);
    return status.ok ? ffi::Error::Success()
                     : Failure(status.what, status.cuda_error);
  }
  // With dbias, one read of x where a kernel takes both. When the nodes are
  // 32-row blocks of the tree's axis K (one tree per example; with both
  // layouts, the colwise blocks), the tile kernel writes the node sums, then
  // they are finished: rowwise only, x is viewed as batch x K x cols (whole
  // rowwise blocks of each row of cols). Otherwise, rowwise only, the column
  // tree sums write the rowwise blocks; else the MXFP8 kernels, then the
  // dbias.
  Fp8QuantizeBuffers sums;
  sums.x = buffers.x;
  sums.dbias = dbias_nodes->typed_data();
  sums.dbias_cast = dbias_cast->untyped_data();
  cuda::Mxfp8RowOutput mx;
  mx.row = buffers.row;
  mx.row_scale = buffers.row_scale;
  mx.format = problem->format;
  const bool row_only = problem->rowwise && !problem->colwise &&
                        problem->last % kMxfp8BlockSize == 0;
  Mxfp8QuantizeProblem row_view = *problem;
  row_view.outer = dbias.batch;
  row_view.blocked = dbias.rows;
  row_view.inner = 1;
  row_view.last = dbias.cols;
  const bool row_nodes =
      row_only && dbias.dbias_kept_rows == 1 &&
      dbias.dbias_split * kMxfp8BlockSize == dbias.rows &&
      cuda::Mxfp8RowTileSumsTake(row_view, buffers);
  const bool fused =
      row_only && !row_nodes && cuda::Fp8DbiasOnlyTakesMxfp8(dbias, buffers.x);
  bool summed = false;
  if (row_nodes) {
    const cuda::Mxfp8LaunchStatus status =
        cuda::Mxfp8Quantize(row_view, buffers, stream, sums.dbias);
    if (!status.ok) return Failure(status.what, status.cuda_error);
    summed = status.tile_sums_written;
  } else if (!fused) {
    const bool block_nodes =
        problem->colwise && problem->outer == dbias.batch &&
        problem->blocked % kMxfp8BlockSize == 0 &&
        dbias.dbias_split * kMxfp8BlockSize == problem->blocked &&
        dbias.cols == problem->inner * problem->last;
    const cuda::Mxfp8LaunchStatus status = cuda::Mxfp8Quantize(
        *problem, buffers, stream, block_nodes ? sums.dbias : nullptr);
    if (!status.ok) return Failure(status.what, status.cuda_error);
    summed = status.tile_sums_written;
  }
  const cuda::LaunchStatus status =
      summed ? cuda::Fp8FinishDbias(dbias, sums, stream)
             : cuda::Fp8DbiasOnly(dbias, sums, fused ? &mx : nullptr, stream);
  return status.ok ? ffi::Error::Success()
                   : Failure(status.what, status.cuda_error);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Mxfp8QuantizeCuda, eqx_quant::Mxfp8QuantizeCudaImpl,
    eqx_quant::BindMxfp8QuantizeOperands(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
