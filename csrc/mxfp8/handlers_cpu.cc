// XLA FFI handler (CPU) of eqx_quant_mxfp8_quantize: the preamble
// (mxfp8/args.h), then the CPU kernel and, with dbias, the FP8 CPU kernel's
// dbias-only form.

#include <cstddef>
#include <vector>

#include "common/fp8_quantize_problem.h"
#include "common/mxfp8_problem.h"
#include "common/parallel_for.h"
#include "common/scoped_ieee_float_env.h"
#include "ffi/cpu_thread_pool.h"
#include "fp8/quantize_cpu.h"
#include "mxfp8/args.h"
#include "mxfp8/binding.h"
#include "mxfp8/quantize_cpu.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Mxfp8QuantizeCpuImpl(ffi::ThreadPool pool, ffi::AnyBuffer x,
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
  // IEEE subnormals under XLA's flush-to-zero CPU runtime, as RunCpuKernel
  // (ffi/handler_preamble.h) does for the ops with one kernel.
  // (The helper threads of `parallel` switch themselves.)
  ScopedIeeeFloatEnv ieee_float_env;
  const ParallelFor parallel = MakeParallelFor(pool);
  cpu::Mxfp8Quantize(call->mx.problem, call->mx.buffers, parallel);
  const Fp8QuantizeProblem& dbias = call->dbias.problem;
  if (dbias.with_dbias) {
    // The FP8 kernel's dbias-only form (its scale, scale_inv and amax are
    // per-example scalars nobody reads).
    std::vector<float> scale(static_cast<size_t>(dbias.batch), 1.0f);
    std::vector<float> unread(2 * scale.size());
    Fp8QuantizeBuffers sums = call->dbias.buffers;
    sums.scale = scale.data();
    sums.scale_inv = unread.data();
    sums.amax = unread.data() + scale.size();
    cpu::Fp8Quantize(dbias, sums, parallel);
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Mxfp8QuantizeCpu, eqx_quant::Mxfp8QuantizeCpuImpl,
    eqx_quant::BindMxfp8QuantizeOperands(eqx_quant::BindCpuThreadPool()));
