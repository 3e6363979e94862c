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
//   Ret 4  dbias_nodes  Buffer<F32>  with_dbias: the float32 node sums,
//                                B + S[:dbias_keep] + (dbias_split,) +
//                                S[flatten_axis:]; else (0,)
//   Ret 5  dbias_cast AnyBuffer  with dbias_cast: node 0 in x's type,
//                                B + S[:dbias_keep] + S[flatten_axis:]; else (0,)
//   Attrs  (decoded by name into one Mxfp8QuantizeAttrs, mxfp8/args.h)
//          block_axis: int64  the dim of x (batch dims included) that
//                             colwise blocks run along, 0 <= block_axis <=
//                             rank - 2; -1 when colwise is false
//          n_batch, flatten_axis, dbias_keep, dbias_split: int64  the dbias'
//                             shape (ffi/dbias_args.h; B = x.shape[:n_batch],
//                             S the rest)
//          rowwise, colwise, with_dbias, dbias_cast: bool
//
// The scale outputs are AnyBuffers (not Buffer<U8>) so that a wrong element
// type is reported by the op's own validation, like every other mismatch.
//
// A handler bound with this schema has the parameters (after any context
// parameters, e.g. the CUDA stream): the buffers in the order above (the
// binding's types; Result<...> for Rets), then Mxfp8QuantizeAttrs attrs.

#ifndef EQX_QUANT_CSRC_MXFP8_BINDING_H_
#define EQX_QUANT_CSRC_MXFP8_BINDING_H_

#include <cstdint>
#include <utility>

#include "mxfp8/args.h"
#include "xla/ffi/api/ffi.h"

// The attributes, by name, into the struct's members (in declaration order).
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    eqx_quant::Mxfp8QuantizeAttrs,
    xla::ffi::StructMember<int64_t>("block_axis"),
    xla::ffi::StructMember<int64_t>("n_batch"),
    xla::ffi::StructMember<int64_t>("flatten_axis"),
    xla::ffi::StructMember<int64_t>("dbias_keep"),
    xla::ffi::StructMember<int64_t>("dbias_split"),
    xla::ffi::StructMember<bool>("rowwise"),
    xla::ffi::StructMember<bool>("colwise"),
    xla::ffi::StructMember<bool>("with_dbias"),
    xla::ffi::StructMember<bool>("dbias_cast"));

namespace eqx_quant {

// Appends the operands above to `binding`: pass Bind() with the thread pool
// context (BindCpuThreadPool, ffi/cpu_thread_pool.h) for the CPU handler, or
// with the platform stream context for the CUDA one.
template <typename Binding>
auto BindMxfp8QuantizeOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()              // x
      .template Ret<xla::ffi::AnyBuffer>()              // row
      .template Ret<xla::ffi::AnyBuffer>()              // row_scale
      .template Ret<xla::ffi::AnyBuffer>()              // col
      .template Ret<xla::ffi::AnyBuffer>()              // col_scale
      .template Ret<xla::ffi::Buffer<xla::ffi::F32>>()  // dbias_nodes
      .template Ret<xla::ffi::AnyBuffer>()              // dbias_cast
      .template Attrs<Mxfp8QuantizeAttrs>();
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_MXFP8_BINDING_H_
