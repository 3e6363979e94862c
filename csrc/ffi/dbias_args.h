// Validation of the fused bias gradient's attributes and operands, shared by
// the ops that return it (eqx_quant_fp8_quantize, eqx_quant_mxfp8_quantize):
// the dbias of x (B + S, B = n_batch dims) is the canonical tree sum over
// S[:flatten_axis], returned as float32 node sums of axis S[dbias_keep]
// (dbias, B + S[:dbias_keep] + (dbias_split,) + S[flatten_axis:]) and, with
// dbias_cast, node 0 in x's type (B + S[:dbias_keep] + S[flatten_axis:]).

#ifndef EQX_QUANT_CSRC_FFI_DBIAS_ARGS_H_
#define EQX_QUANT_CSRC_FFI_DBIAS_ARGS_H_

#include <cstdint>
#include <optional>

#include "common/fp8_quantize_problem.h"
#include "ffi/operand_text.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

struct DbiasAttrs {
  int64_t n_batch = 0;
  int64_t flatten_axis = 0;
  int64_t dbias_keep = 0;
  int64_t dbias_split = 1;
  bool with_dbias = false;
  bool dbias_cast = false;
  // The most nodes the op's kernels take (kMaxDbiasSplit for the FP8 op).
  int64_t max_split = kMaxDbiasSplit;
};

// Checks n_batch and flatten_axis against x, the dbias attributes, and the
// dbias / dbias_cast operands (both (0,) without dbias); on success fills
// problem's batch, rows, cols, with_dbias, dbias_cast and dbias_* fields
// (input_type, format and the outputs are the caller's).
std::optional<xla::ffi::Error> CheckDbiasOperands(
    const OperandErrors& errors, const xla::ffi::AnyBuffer& x,
    const xla::ffi::Buffer<xla::ffi::F32>& dbias,
    const xla::ffi::AnyBuffer& dbias_cast, const DbiasAttrs& attrs,
    Fp8QuantizeProblem* problem);

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_DBIAS_ARGS_H_
