// The single XLA FFI binding schema of eqx_quant_mxfp8_quantize, shared by
// the CPU and CUDA handlers (docs/block_formats.md). Operands, in order:
//
//   Arg 0  x          AnyBuffer  F32 | F16 | BF16, any rank >= 1
//   Ret 0  row        AnyBuffer  F8E4M3FN | F8E5M2; x's shape if rowwise,
//                                else (0,)
//   Ret 1  row_scale  AnyBuffer  U8 (E8M0); x.shape[:-1] + (ceil(L/32),) if
//                                rowwise, else (0,)
//   Ret 2  col        AnyBuffer  the FP8 type of row; x's shape (N layout) if
//                                colwise, else (0,)
//   Ret 3  col_scale  AnyBuffer  U8 (E8M0); x's shape with dim block_axis
//                                replaced by ceil(K/32) if colwise, else (0,)
//   Attrs  block_axis: int64  the dim of x (batch dims included) that
//                             colwise blocks run along, 0 <= block_axis <=
//                             rank - 2; -1 when colwise is false
//          rowwise: bool, colwise: bool
//
// The scale outputs are AnyBuffers (not Buffer<U8>) so that a wrong element
// type is reported by the op's own validation, like every other mismatch.
//
// A handler implementation bound with this schema has the parameters
// (after any context parameters, e.g. the CUDA stream):
//   xla::ffi::AnyBuffer x,
//   xla::ffi::Result<xla::ffi::AnyBuffer> row,
//   xla::ffi::Result<xla::ffi::AnyBuffer> row_scale,
//   xla::ffi::Result<xla::ffi::AnyBuffer> col,
//   xla::ffi::Result<xla::ffi::AnyBuffer> col_scale,
//   int64_t block_axis, bool rowwise, bool colwise

#ifndef EQX_QUANT_CSRC_FFI_MXFP8_QUANTIZE_BINDING_H_
#define EQX_QUANT_CSRC_FFI_MXFP8_QUANTIZE_BINDING_H_

#include <cstdint>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// Appends the operands above to `binding`: pass xla::ffi::Ffi::Bind() for the
// CPU handler, or Bind() with the platform stream context already added.
template <typename Binding>
auto BindMxfp8QuantizeOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()  // x
      .template Ret<xla::ffi::AnyBuffer>()  // row
      .template Ret<xla::ffi::AnyBuffer>()  // row_scale
      .template Ret<xla::ffi::AnyBuffer>()  // col
      .template Ret<xla::ffi::AnyBuffer>()  // col_scale
      .template Attr<int64_t>("block_axis")
      .template Attr<bool>("rowwise")
      .template Attr<bool>("colwise");
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_MXFP8_QUANTIZE_BINDING_H_
