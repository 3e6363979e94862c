// Validation of the operands of eqx_quant_mxfp8_quantize and their
// translation into the XLA-free Mxfp8QuantizeProblem (and the bias
// gradient's FP8 dbias-only problem) with the kernels' buffers: the preamble
// (ffi/handler_preamble.h) of the CPU and the CUDA handler.

#ifndef EQX_QUANT_CSRC_MXFP8_ARGS_H_
#define EQX_QUANT_CSRC_MXFP8_ARGS_H_

#include <cstdint>

#include "common/fp8_quantize_problem.h"
#include "common/mxfp8_problem.h"
#include "ffi/handler_preamble.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// The attributes of the op, decoded by name (mxfp8/binding.h; an aggregate:
// its members in the order of the binding's struct decoding).
struct Mxfp8QuantizeAttrs {
  int64_t block_axis = -1;
  int64_t n_batch = 0;       // the dbias attributes (ffi/dbias_args.h)
  int64_t flatten_axis = 0;
  int64_t dbias_keep = 0;
  int64_t dbias_split = 1;
  bool rowwise = false;
  bool colwise = false;
  bool with_dbias = false;
  bool dbias_cast = false;
};

// One validated call: the MXFP8 problem with its buffers (row, row_scale,
// col, col_scale null when absent), and the bias gradient's part as a
// dbias-only FP8 problem (one tree per example over at most one axis longer
// than 1; dbias.problem.with_dbias false without it) with its buffers x,
// dbias (the node sums) and dbias_cast; its scale, scale_inv and amax are the
// handler's.
struct Mxfp8QuantizeCall {
  PreparedCall<Mxfp8QuantizeProblem, Mxfp8QuantizeBuffers> mx;
  PreparedCall<Fp8QuantizeProblem, Fp8QuantizeBuffers> dbias;
};

// Checks every rank, dimension and element type against the op's contract
// and returns the call, or an InvalidArgument error whose message starts with
// "eqx_quant_mxfp8_quantize: " and names the offending operand or attribute
// with its expected and actual value.
xla::ffi::ErrorOr<Mxfp8QuantizeCall> PrepareMxfp8Quantize(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& row,
    const xla::ffi::AnyBuffer& row_scale, const xla::ffi::AnyBuffer& col,
    const xla::ffi::AnyBuffer& col_scale,
    const xla::ffi::Buffer<xla::ffi::F32>& dbias_nodes,
    const xla::ffi::AnyBuffer& dbias_cast, const Mxfp8QuantizeAttrs& attrs);

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_MXFP8_ARGS_H_
