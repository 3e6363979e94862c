// Validation of the operands of eqx_quant_mxfp8_dequantize and
// eqx_quant_nvfp4_dequantize and their translation into the XLA-free problems
// of common/dequantize_problem.h: the preamble of their CPU and CUDA handlers.
//
//   mxfp8:  Arg 0  data           F8E4M3FN | F8E5M2  (A, L, B)
//           Arg 1  scales         U8                 (A, ceil(L/32), B)
//           Ret 0  out            BF16 | F32         (A, L, B)
//   nvfp4:  Arg 0  codes          F4E2M1FN           (A, L)   packed two per byte
//           Arg 1  scales         U8                 (A, ceil(L/16))
//           Arg 2  decode_scales  F32                (E,)     E divides A
//           Ret 0  out            BF16 | F32         (A, L)
//   grouped mxfp8:
//           Arg 0  data           F8E4M3FN | F8E5M2  (R, N)
//           Arg 1  scales         U8                 (L,)  the part's swizzled scale buffer
//           Arg 2  sizes          S32                (G,)
//           Ret 0  out            BF16               (R, N)
//           Attr   rows_per_unit  int64              >= 1, dividing R

#ifndef EQX_QUANT_CSRC_FFI_DEQUANTIZE_ARGS_H_
#define EQX_QUANT_CSRC_FFI_DEQUANTIZE_ARGS_H_

#include <cstdint>

#include "common/dequantize_problem.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// `target`: the FFI target name the errors start with.
xla::ffi::ErrorOr<Mxfp8DequantizeProblem> PrepareMxfp8Dequantize(
    const char* target, const xla::ffi::AnyBuffer& data, const xla::ffi::AnyBuffer& scales,
    xla::ffi::AnyBuffer& out);

xla::ffi::ErrorOr<Nvfp4DequantizeProblem> PrepareNvfp4Dequantize(
    const char* target, const xla::ffi::AnyBuffer& codes, const xla::ffi::AnyBuffer& scales,
    const xla::ffi::AnyBuffer& decode_scales, xla::ffi::AnyBuffer& out);

// `layout` is left null: the CUDA handler puts its scratch there.
xla::ffi::ErrorOr<GroupedMxfp8DequantizeProblem> PrepareGroupedMxfp8Dequantize(
    const char* target, const xla::ffi::AnyBuffer& data, const xla::ffi::AnyBuffer& scales,
    const xla::ffi::AnyBuffer& sizes, xla::ffi::AnyBuffer& out, int64_t rows_per_unit);

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_DEQUANTIZE_ARGS_H_
