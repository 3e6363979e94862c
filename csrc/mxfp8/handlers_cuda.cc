// XLA FFI handler (CUDA) of eqx_quant_mxfp8_quantize: the preamble exactly as
// on CPU (mxfp8/args.h), then the CUDA kernels (mxfp8/quantize_cuda.h, and for
// the dbias fp8/quantize_cuda.h) enqueued on XLA's stream. Nothing is
// allocated and nothing synchronises, so the handler can be captured into a
// CUDA graph (kCmdBufferCompatible).

#include <cuda_runtime_api.h>

#include "common/fp8_quantize_problem.h"
#include "common/mxfp8_problem.h"
#include "ffi/cuda_launch_error.h"
#include "fp8/quantize_cuda.h"
#include "mxfp8/args.h"
#include "mxfp8/binding.h"
#include "mxfp8/quantize_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

// Every failure is internal: the preamble admits only what the kernels take.
template <typename Status>
ffi::Error ToError(const Status& status) {
  return LaunchStatusError("eqx_quant_mxfp8_quantize_cuda", status,
                           ffi::ErrorCode::kInternal);
}

ffi::Error Mxfp8QuantizeCudaImpl(cudaStream_t stream, ffi::AnyBuffer x,
                                 ffi::Result<ffi::AnyBuffer> row,
                                 ffi::Result<ffi::AnyBuffer> row_scale,
                                 ffi::Result<ffi::AnyBuffer> col,
                                 ffi::Result<ffi::AnyBuffer> col_scale,
                                 ffi::ResultBuffer<ffi::F32> dbias_nodes,
                                 ffi::Result<ffi::AnyBuffer> dbias_cast,
                                 Mxfp8QuantizeAttrs attrs) {
  ffi::ErrorOr<Mxfp8QuantizeCall> call =
      PrepareMxfp8Quantize(x, *row, *row_scale, *col, *col_scale,
                           *dbias_nodes, *dbias_cast, attrs);
  if (!call.has_value()) return call.error();
  const Mxfp8QuantizeProblem& problem = call->mx.problem;
  const Mxfp8QuantizeBuffers& buffers = call->mx.buffers;
  const Fp8QuantizeProblem& dbias = call->dbias.problem;
  const Fp8QuantizeBuffers& sums = call->dbias.buffers;
  if (!dbias.with_dbias) {
    return ToError(cuda::Mxfp8Quantize(problem, buffers, stream));
  }
  // With dbias, one read of x where a kernel takes both. When the nodes are
  // 32-row blocks of the tree's axis K (one tree per example; with both
  // layouts, the colwise blocks), the tile kernel writes the node sums, then
  // they are finished: rowwise only, x is viewed as batch x K x cols (whole
  // rowwise blocks of each row of cols). Otherwise, rowwise only, the column
  // tree sums write the rowwise blocks; else the MXFP8 kernels, then the
  // dbias.
  cuda::Mxfp8RowOutput mx;
  mx.row = buffers.row;
  mx.row_scale = buffers.row_scale;
  mx.format = problem.format;
  const bool row_only = problem.rowwise && !problem.colwise &&
                        problem.last % kMxfp8BlockSize == 0;
  Mxfp8QuantizeProblem row_view = problem;
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
    if (!status.ok) return ToError(status);
    summed = status.tile_sums_written;
  } else if (!fused) {
    const bool block_nodes =
        problem.colwise && problem.outer == dbias.batch &&
        problem.blocked % kMxfp8BlockSize == 0 &&
        dbias.dbias_split * kMxfp8BlockSize == problem.blocked &&
        dbias.cols == problem.inner * problem.last;
    const cuda::Mxfp8LaunchStatus status = cuda::Mxfp8Quantize(
        problem, buffers, stream, block_nodes ? sums.dbias : nullptr);
    if (!status.ok) return ToError(status);
    summed = status.tile_sums_written;
  }
  return ToError(summed ? cuda::Fp8FinishDbias(dbias, sums, stream)
                        : cuda::Fp8DbiasOnly(dbias, sums, fused ? &mx : nullptr,
                                             stream));
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Mxfp8QuantizeCuda, eqx_quant::Mxfp8QuantizeCudaImpl,
    eqx_quant::BindMxfp8QuantizeOperands(eqx_quant::BindCudaStream()),
    {xla::ffi::Traits::kCmdBufferCompatible});
