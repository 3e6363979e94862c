// The XLA FFI binding schemas of eqx_quant_nvfp4_amax and
// eqx_quant_nvfp4_quantize (docs/block_formats.md, "The ops"), shared by the
// CPU and CUDA handlers. B = batch dims (the first n_batch dims of x), S = the
// per-example shape (rank n), fa = block_axis - n_batch + 1, K = S[fa-1],
// L = S[n-1].
//
// eqx_quant_nvfp4_amax:
//   Arg 0  x          F32 | F16 | BF16   B + S
//   Ret 0  amax       F32                B + (1,)
//   Ret 1  rht_amax   F32                B + (1,) if with_rht, else (0,)
//   Attrs  n_batch: int64, block_axis: int64, with_rht: bool,
//          rht_sign_mask: int64, decoded by name into one Nvfp4AmaxAttrs
//          (nvfp4/args.h)
//
// eqx_quant_nvfp4_quantize:
//   Arg 0  x          F32 | F16 | BF16   B + S
//   Arg 1  amax       F32                B + (1,)
//   Arg 2  col_amax   F32                B + (1,)
//   Arg 3  key        U32                B + (2,)   (B + (0,) allowed without SR)
//   Arg 4  offset     S32                (n,)       ((0,) allowed without SR)
//   Ret 0  row        F4E2M1FN           B + S                     (rowwise)
//   Ret 1  row_scale  F8E4M3FN           B + S[:n-1] + (ceil(L/16),)
//   Ret 2  col        F4E2M1FN           B + S[fa:] + S[:fa]       (colwise)
//   Ret 3  col_scale  F8E4M3FN           B + S[fa:] + S[:fa-1] + (ceil(K/16),)
// (a disabled part is a (0,) buffer of its type). The F4E2M1FN buffers are
// packed: flat element i of the buffer is nibble i % 2 (0 = low) of byte
// i / 2, so a buffer of n elements is (n + 1) / 2 bytes (size_bytes() says n).
//   Attrs  n_batch: int64, block_axis: int64, rowwise: bool, colwise: bool,
//          use_2d: bool, use_rht: bool, rht_sign_mask: int64,
//          stochastic_rounding: bool, global_shape: int64 array (n,),
//          decoded by name into one Nvfp4QuantizeAttrs (nvfp4/args.h)
//
// Every buffer is bound as AnyBuffer so that the handler checks the element
// types itself and reports them with the op's own error messages. A handler
// bound with one of these schemas has the parameters (after any context
// parameters, e.g. the CUDA stream): the buffers in the order above
// (AnyBuffer for Args, Result<AnyBuffer> for Rets), then the attributes'
// struct.

#ifndef EQX_QUANT_CSRC_NVFP4_BINDING_H_
#define EQX_QUANT_CSRC_NVFP4_BINDING_H_

#include <cstdint>
#include <utility>

#include "nvfp4/args.h"
#include "xla/ffi/api/ffi.h"

// The attributes, by name, into the structs' members (in declaration order).
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    eqx_quant::Nvfp4AmaxAttrs, xla::ffi::StructMember<int64_t>("n_batch"),
    xla::ffi::StructMember<int64_t>("block_axis"),
    xla::ffi::StructMember<bool>("with_rht"),
    xla::ffi::StructMember<int64_t>("rht_sign_mask"));

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    eqx_quant::Nvfp4QuantizeAttrs, xla::ffi::StructMember<int64_t>("n_batch"),
    xla::ffi::StructMember<int64_t>("block_axis"),
    xla::ffi::StructMember<bool>("rowwise"),
    xla::ffi::StructMember<bool>("colwise"),
    xla::ffi::StructMember<bool>("use_2d"),
    xla::ffi::StructMember<bool>("use_rht"),
    xla::ffi::StructMember<int64_t>("rht_sign_mask"),
    xla::ffi::StructMember<bool>("stochastic_rounding"),
    xla::ffi::StructMember<xla::ffi::Span<const int64_t>>("global_shape"));

namespace eqx_quant {

// Append the operands above to `binding`: pass Bind() with the thread pool
// context (BindCpuThreadPool, ffi/cpu_thread_pool.h) for a CPU handler, or
// with the platform stream context for a CUDA one.
template <typename Binding>
auto BindNvfp4AmaxOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()  // x
      .template Ret<xla::ffi::AnyBuffer>()  // amax
      .template Ret<xla::ffi::AnyBuffer>()  // rht_amax
      .template Attrs<Nvfp4AmaxAttrs>();
}

template <typename Binding>
auto BindNvfp4QuantizeOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()  // x
      .template Arg<xla::ffi::AnyBuffer>()  // amax
      .template Arg<xla::ffi::AnyBuffer>()  // col_amax
      .template Arg<xla::ffi::AnyBuffer>()  // key
      .template Arg<xla::ffi::AnyBuffer>()  // offset
      .template Ret<xla::ffi::AnyBuffer>()  // row
      .template Ret<xla::ffi::AnyBuffer>()  // row_scale
      .template Ret<xla::ffi::AnyBuffer>()  // col
      .template Ret<xla::ffi::AnyBuffer>()  // col_scale
      .template Attrs<Nvfp4QuantizeAttrs>();
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_NVFP4_BINDING_H_
