// The XLA FFI binding schemas of the grouped (MoE) ops (docs/grouped.md,
// "Ops"), shared by the CPU and CUDA handlers. Bt = the n_batch
// leading batch dims of x, (R, N) = the 2-D view of one example, G = the
// number of groups (G >= 1), U = rows_per_unit. Lr / Lc = the worst-case
// scale buffer lengths of common/grouped_layout.h (ScaleBufferBytes) for the
// format's block B (32 MXFP8, 16 NVFP4).
//
// eqx_quant_grouped_fp8_quantize:
//   Arg 0  x            F32 | F16 | BF16      Bt + (R, N)
//   Arg 1  scale        F32                   Bt + (G,)
//   Arg 2  group_sizes  S32                   Bt + (G,)
//   Ret 0  row          F8E4M3FN | F8E5M2     Bt + (R, N) if rowwise, else (0,)
//   Ret 1  col          the FP8 type of row   Bt + (R*N,) if colwise, else (0,)
//   Ret 2  scale_inv    F32                   Bt + (G,)
//   Ret 3  amax         F32                   Bt + (G,)
//   Attrs  n_batch: int64, rows_per_unit: int64, rowwise: bool,
//          colwise: bool
//
// eqx_quant_grouped_mxfp8_quantize:
//   Arg 0  x            F32 | F16 | BF16      Bt + (R, N)
//   Arg 1  group_sizes  S32                   Bt + (G,)
//   Ret 0  row          F8E4M3FN | F8E5M2     Bt + (R, N) if rowwise, else (0,)
//   Ret 1  row_scale    U8 (E8M0)             Bt + (Lr,) if rowwise, else (0,)
//   Ret 2  col          the FP8 type of row   Bt + (R, N) if colwise, else (0,)
//   Ret 3  col_scale    U8 (E8M0)             Bt + (Lc,) if colwise, else (0,)
//   Attrs  n_batch: int64, rows_per_unit: int64, rowwise: bool,
//          colwise: bool
//
// eqx_quant_grouped_nvfp4_quantize:
//   Arg 0  x            F32 | F16 | BF16      Bt + (R, N)
//   Arg 1  amax         F32                   Bt + (G,)
//   Arg 2  keys         U32                   Bt + (G, 2)  (Bt + (G, 0) without SR)
//   Arg 3  group_sizes  S32                   Bt + (G,)
//   Ret 0  row          F4E2M1FN              Bt + (R, N) if rowwise, else (0,)
//   Ret 1  row_scale    U8 (E4M3)             Bt + (Lr,) if rowwise, else (0,)
//   Ret 2  col          F4E2M1FN              Bt + (R*N,) if colwise, else (0,)
//   Ret 3  col_scale    U8 (E4M3)             Bt + (Lc,) if colwise, else (0,)
//   Attrs  n_batch: int64, rows_per_unit: int64, rowwise: bool,
//          colwise: bool, use_2d: bool, stochastic_rounding: bool
//   The F4E2M1FN buffers are packed as eqx_quant_nvfp4_quantize's
//   (nvfp4/binding.h): flat element i (batch dims included) is nibble i % 2
//   (0 = low) of byte i / 2.
//
// eqx_quant_grouped_fp8_block_quantize (nb = ceil(N/128), W = W(R, G, 128)
// of common/grouped_layout.h, WorstCaseUnits):
//   Arg 0  x            F32 | F16 | BF16      Bt + (R, N)
//   Arg 1  group_sizes  S32                   Bt + (G,)
//   Ret 0  row          F8E4M3FN | F8E5M2     Bt + (R, N) if rowwise, else (0,)
//   Ret 1  row_scale    F32                   Bt + (R, nb), with use_2d
//                                             Bt + (W, nb); (0,) if not rowwise
//   Ret 2  col          the FP8 type of row   Bt + (R*N,) if colwise, else (0,)
//   Ret 3  col_scale    F32                   Bt + (N, W), with use_2d
//                                             Bt + (nb, W); (0,) if not colwise
//   Attrs  n_batch: int64, rows_per_unit: int64, rowwise: bool,
//          colwise: bool, use_2d: bool, power_2_scales: bool,
//          amax_epsilon: float
//
// eqx_quant_grouped_dbias:
//   Arg 0  x            F32 | F16 | BF16      Bt + (R, N)
//   Arg 1  group_sizes  S32                   Bt + (G,)
//   Ret 0  dbias        F32                   Bt + (G, N)
//   Attrs  n_batch: int64, rows_per_unit: int64
//
// The attributes are decoded by name into one struct per op (grouped/args.h):
// GroupedQuantizeAttrs (the FP8 and MXFP8 ops), GroupedNvfp4QuantizeAttrs,
// GroupedFp8BlockQuantizeAttrs, GroupedDbiasAttrs.
//
// Every buffer is bound as AnyBuffer so that the handler checks the element
// types itself and reports them with the op's own error messages. A handler
// bound with one of these schemas has the parameters (after any context
// parameters, e.g. the CUDA stream): the buffers in the order above
// (AnyBuffer for Args, Result<AnyBuffer> for Rets), then the attributes'
// struct.

#ifndef EQX_QUANT_CSRC_GROUPED_BINDING_H_
#define EQX_QUANT_CSRC_GROUPED_BINDING_H_

#include <cstdint>
#include <utility>

#include "grouped/args.h"
#include "xla/ffi/api/ffi.h"

// The attributes, by name, into the structs' members (in declaration order;
// GroupedNvfp4QuantizeAttrs' base first).
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    eqx_quant::GroupedQuantizeAttrs,
    xla::ffi::StructMember<int64_t>("n_batch"),
    xla::ffi::StructMember<int64_t>("rows_per_unit"),
    xla::ffi::StructMember<bool>("rowwise"),
    xla::ffi::StructMember<bool>("colwise"));

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    eqx_quant::GroupedNvfp4QuantizeAttrs,
    xla::ffi::StructMember<int64_t>("n_batch"),
    xla::ffi::StructMember<int64_t>("rows_per_unit"),
    xla::ffi::StructMember<bool>("rowwise"),
    xla::ffi::StructMember<bool>("colwise"),
    xla::ffi::StructMember<bool>("use_2d"),
    xla::ffi::StructMember<bool>("stochastic_rounding"));

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    eqx_quant::GroupedFp8BlockQuantizeAttrs,
    xla::ffi::StructMember<int64_t>("n_batch"),
    xla::ffi::StructMember<int64_t>("rows_per_unit"),
    xla::ffi::StructMember<bool>("rowwise"),
    xla::ffi::StructMember<bool>("colwise"),
    xla::ffi::StructMember<bool>("use_2d"),
    xla::ffi::StructMember<bool>("power_2_scales"),
    xla::ffi::StructMember<float>("amax_epsilon"));

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    eqx_quant::GroupedDbiasAttrs, xla::ffi::StructMember<int64_t>("n_batch"),
    xla::ffi::StructMember<int64_t>("rows_per_unit"));

namespace eqx_quant {

// Append the operands above to `binding`: pass Bind() with the thread pool
// context (BindCpuThreadPool, ffi/cpu_thread_pool.h) for a CPU handler, or
// with the platform stream context for a CUDA one.
template <typename Binding>
auto BindGroupedFp8QuantizeOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()  // x
      .template Arg<xla::ffi::AnyBuffer>()  // scale
      .template Arg<xla::ffi::AnyBuffer>()  // group_sizes
      .template Ret<xla::ffi::AnyBuffer>()  // row
      .template Ret<xla::ffi::AnyBuffer>()  // col
      .template Ret<xla::ffi::AnyBuffer>()  // scale_inv
      .template Ret<xla::ffi::AnyBuffer>()  // amax
      .template Attrs<GroupedQuantizeAttrs>();
}

template <typename Binding>
auto BindGroupedMxfp8QuantizeOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()  // x
      .template Arg<xla::ffi::AnyBuffer>()  // group_sizes
      .template Ret<xla::ffi::AnyBuffer>()  // row
      .template Ret<xla::ffi::AnyBuffer>()  // row_scale
      .template Ret<xla::ffi::AnyBuffer>()  // col
      .template Ret<xla::ffi::AnyBuffer>()  // col_scale
      .template Attrs<GroupedQuantizeAttrs>();
}

template <typename Binding>
auto BindGroupedNvfp4QuantizeOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()  // x
      .template Arg<xla::ffi::AnyBuffer>()  // amax
      .template Arg<xla::ffi::AnyBuffer>()  // keys
      .template Arg<xla::ffi::AnyBuffer>()  // group_sizes
      .template Ret<xla::ffi::AnyBuffer>()  // row
      .template Ret<xla::ffi::AnyBuffer>()  // row_scale
      .template Ret<xla::ffi::AnyBuffer>()  // col
      .template Ret<xla::ffi::AnyBuffer>()  // col_scale
      .template Attrs<GroupedNvfp4QuantizeAttrs>();
}

template <typename Binding>
auto BindGroupedFp8BlockQuantizeOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()  // x
      .template Arg<xla::ffi::AnyBuffer>()  // group_sizes
      .template Ret<xla::ffi::AnyBuffer>()  // row
      .template Ret<xla::ffi::AnyBuffer>()  // row_scale
      .template Ret<xla::ffi::AnyBuffer>()  // col
      .template Ret<xla::ffi::AnyBuffer>()  // col_scale
      .template Attrs<GroupedFp8BlockQuantizeAttrs>();
}

template <typename Binding>
auto BindGroupedDbiasOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()  // x
      .template Arg<xla::ffi::AnyBuffer>()  // group_sizes
      .template Ret<xla::ffi::AnyBuffer>()  // dbias
      .template Attrs<GroupedDbiasAttrs>();
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_GROUPED_BINDING_H_
