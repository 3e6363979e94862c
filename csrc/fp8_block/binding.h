// The XLA FFI binding of eqx_quant_fp8_block_quantize (its operands:
// fp8_block/args.h), shared by the CPU and CUDA handlers.

#ifndef EQX_QUANT_CSRC_FP8_BLOCK_BINDING_H_
#define EQX_QUANT_CSRC_FP8_BLOCK_BINDING_H_

#include <cstdint>
#include <utility>

#include "fp8_block/args.h"
#include "xla/ffi/api/ffi.h"

// The attributes, by name, into Fp8BlockQuantizeAttrs' members (in declaration
// order).
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    eqx_quant::Fp8BlockQuantizeAttrs, xla::ffi::StructMember<int64_t>("n_batch"),
    xla::ffi::StructMember<int64_t>("flatten_axis"),
    xla::ffi::StructMember<bool>("rowwise"), xla::ffi::StructMember<bool>("colwise"),
    xla::ffi::StructMember<bool>("use_2d"),
    xla::ffi::StructMember<bool>("power_2_scales"),
    xla::ffi::StructMember<float>("amax_epsilon"));

namespace eqx_quant {

// Append the operands to `binding`: Bind() with the thread pool context for a
// CPU handler, or with the stream context for a CUDA one.
template <typename Binding>
auto BindFp8BlockQuantizeOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()  // x
      .template Ret<xla::ffi::AnyBuffer>()  // row
      .template Ret<xla::ffi::AnyBuffer>()  // row_scale
      .template Ret<xla::ffi::AnyBuffer>()  // col
      .template Ret<xla::ffi::AnyBuffer>()  // col_scale
      .template Attrs<Fp8BlockQuantizeAttrs>();
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FP8_BLOCK_BINDING_H_
