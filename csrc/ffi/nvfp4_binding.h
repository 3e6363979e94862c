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
//          rht_sign_mask: int64
// Handler parameters (after any context parameters):
//   AnyBuffer x, Result<AnyBuffer> amax, Result<AnyBuffer> rht_amax,
//   int64_t n_batch, int64_t block_axis, bool with_rht, int64_t rht_sign_mask
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
//          stochastic_rounding: bool, global_shape: int64 array (n,)
// Handler parameters (after any context parameters):
//   AnyBuffer x, AnyBuffer amax, AnyBuffer col_amax, AnyBuffer key,
//   AnyBuffer offset, Result<AnyBuffer> row, Result<AnyBuffer> row_scale,
//   Result<AnyBuffer> col, Result<AnyBuffer> col_scale, int64_t n_batch,
//   int64_t block_axis, bool rowwise, bool colwise, bool use_2d,
//   bool use_rht, int64_t rht_sign_mask, bool stochastic_rounding,
//   Span<const int64_t> global_shape
//
// Every buffer is bound as AnyBuffer so that the handler checks the element
// types itself and reports them with the op's own error messages.

#ifndef EQX_QUANT_CSRC_FFI_NVFP4_BINDING_H_
#define EQX_QUANT_CSRC_FFI_NVFP4_BINDING_H_

#include <cstdint>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// Append the operands above to `binding`: pass xla::ffi::Ffi::Bind() for a CPU
// handler, or Bind() with the platform stream context already added.
template <typename Binding>
auto BindNvfp4AmaxOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()  // x
      .template Ret<xla::ffi::AnyBuffer>()  // amax
      .template Ret<xla::ffi::AnyBuffer>()  // rht_amax
      .template Attr<int64_t>("n_batch")
      .template Attr<int64_t>("block_axis")
      .template Attr<bool>("with_rht")
      .template Attr<int64_t>("rht_sign_mask");
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
      .template Attr<int64_t>("n_batch")
      .template Attr<int64_t>("block_axis")
      .template Attr<bool>("rowwise")
      .template Attr<bool>("colwise")
      .template Attr<bool>("use_2d")
      .template Attr<bool>("use_rht")
      .template Attr<int64_t>("rht_sign_mask")
      .template Attr<bool>("stochastic_rounding")
      .template Attr<xla::ffi::Span<const int64_t>>("global_shape");
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_NVFP4_BINDING_H_
