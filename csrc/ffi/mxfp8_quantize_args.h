// Validation of the operands of eqx_quant_mxfp8_quantize (shared by the CPU
// and CUDA handlers) and their translation into the XLA-free
// Mxfp8QuantizeProblem.

#ifndef EQX_QUANT_CSRC_FFI_MXFP8_QUANTIZE_ARGS_H_
#define EQX_QUANT_CSRC_FFI_MXFP8_QUANTIZE_ARGS_H_

#include <cstdint>

#include "common/fp8_quantize_problem.h"
#include "common/mxfp8_problem.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// The attributes of the op, as bound in mxfp8_quantize_binding.h (an
// aggregate: its members in the order of the binding's struct decoding).
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

// Checks every rank, dimension and element type against the op's contract
// and returns the problem description, or an InvalidArgument error whose
// message starts with "eqx_quant_mxfp8_quantize: " and names the offending
// operand or attribute with its expected and actual value. `dbias` gets the
// bias gradient's part as a dbias-only FP8 problem (with_dbias false
// without it): one tree per example over at most one axis longer than 1.
xla::ffi::ErrorOr<Mxfp8QuantizeProblem> CheckMxfp8QuantizeOperands(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& row,
    const xla::ffi::AnyBuffer& row_scale, const xla::ffi::AnyBuffer& col,
    const xla::ffi::AnyBuffer& col_scale,
    const xla::ffi::Buffer<xla::ffi::F32>& dbias_nodes,
    const xla::ffi::AnyBuffer& dbias_cast, const Mxfp8QuantizeAttrs& attrs,
    Fp8QuantizeProblem* dbias);

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_MXFP8_QUANTIZE_ARGS_H_
