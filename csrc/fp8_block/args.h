// Validation of the operands of eqx_quant_fp8_block_quantize and their
// translation into the XLA-free Fp8BlockQuantizeProblem with the kernel's
// buffers: the preamble (ffi/handler_preamble.h) of its handlers.
//
// eqx_quant_fp8_block_quantize (eqx_quant/_ops/fp8_block_quantize.py):
//   Arg 0  x          F32 | F16 | BF16     Bt + S
//   Ret 0  row        F8E4M3FN | F8E5M2    Bt + S if rowwise, else (0,)
//   Ret 1  row_scale  F32                  Bt + (R or ceil(R/128), ceil(C/128))
//   Ret 2  col        the FP8 type of row  Bt + S[fa:] + S[:fa] if colwise
//   Ret 3  col_scale  F32                  Bt + (C or ceil(C/128), ceil(R/128))
//   Attrs  n_batch: int64, flatten_axis: int64, rowwise: bool, colwise: bool,
//          use_2d: bool, power_2_scales: bool, amax_epsilon: f32
// (R, C) = (prod S[:fa], prod S[fa:]); the first scale dim is R (C) for 1x128
// blocks and ceil(R/128) (ceil(C/128)) for 128x128 tiles.

#ifndef EQX_QUANT_CSRC_FP8_BLOCK_ARGS_H_
#define EQX_QUANT_CSRC_FP8_BLOCK_ARGS_H_

#include <cstdint>
#include <optional>

#include "common/fp8_block_problem.h"
#include "ffi/handler_preamble.h"
#include "ffi/operand_text.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// The op's attributes, decoded by name (fp8_block/binding.h; an aggregate: its
// members in the order of the binding's struct decoding).
struct Fp8BlockQuantizeAttrs {
  int64_t n_batch = 0;
  int64_t flatten_axis = 0;
  bool rowwise = false;
  bool colwise = false;
  bool use_2d = false;
  bool power_2_scales = false;
  float amax_epsilon = 0.0f;
};

using Fp8BlockQuantizeCall =
    PreparedCall<Fp8BlockQuantizeProblem, Fp8BlockQuantizeBuffers>;

// The call, or an InvalidArgument error whose message starts with
// "eqx_quant_fp8_block_quantize: " and names the operand or attribute with
// its expected and actual value.
// The amax_epsilon attribute's check, shared with the grouped op
// (grouped/args.cc): an error unless it is finite and >= 0.
std::optional<xla::ffi::Error> CheckAmaxEpsilon(const OperandErrors& errors,
                                                float amax_epsilon);

xla::ffi::ErrorOr<Fp8BlockQuantizeCall> PrepareFp8BlockQuantize(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& row,
    const xla::ffi::AnyBuffer& row_scale, const xla::ffi::AnyBuffer& col,
    const xla::ffi::AnyBuffer& col_scale, const Fp8BlockQuantizeAttrs& attrs);

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FP8_BLOCK_ARGS_H_
