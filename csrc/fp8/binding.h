// The single XLA FFI binding schema of eqx_quant_fp8_quantize, shared by the
// CPU and CUDA handlers. B = batch dims (the first n_batch dims of x), S = the
// per-example shape, fa = flatten_axis. Operands, in order:
//
//   Arg 0  x          AnyBuffer    F32 | F16 | BF16, shape B + S
//   Arg 1  scale      Buffer<F32>  B + (1,)
//   Ret 0  row        AnyBuffer    F8E4M3FN | F8E5M2;
//                                  B + S if rowwise, else (0,)
//   Ret 1  col        AnyBuffer    same FP8 type;
//                                  B + S[fa:] + S[:fa] if colwise, else (0,)
//   Ret 2  scale_inv  Buffer<F32>  B + (1,)
//   Ret 3  amax       Buffer<F32>  B + (1,)
//   Ret 4  dbias      Buffer<F32>  B + S[:dbias_keep] + (dbias_split,) +
//                                  S[fa:] if with_dbias, else (0,)
//   Ret 5  dbias_cast AnyBuffer    x's element type; B + S[:dbias_keep] +
//                                  S[fa:] if dbias_cast (node 0 of each
//                                  tree, finished, cast with NaN canonical),
//                                  else (0,)
//   Attrs  n_batch: int64, flatten_axis: int64, dbias_keep: int64,
//          dbias_split: int64, rowwise: bool, colwise: bool,
//          with_dbias: bool, dbias_cast: bool (needs with_dbias),
//          scale_from_amax: bool (scale is the fallback of current scaling),
//          decoded by name into one Fp8QuantizeAttrs (fp8/args.h)
//
// A handler bound with this schema has the parameters (after any context
// parameters, e.g. the CUDA stream): the buffers in the order above (the
// binding's types; Result<...> for Rets), then Fp8QuantizeAttrs attrs.

#ifndef EQX_QUANT_CSRC_FP8_BINDING_H_
#define EQX_QUANT_CSRC_FP8_BINDING_H_

#include <cstdint>
#include <utility>

#include "fp8/args.h"
#include "xla/ffi/api/ffi.h"

// The attributes, by name, into the struct's members (in declaration order).
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    eqx_quant::Fp8QuantizeAttrs, xla::ffi::StructMember<int64_t>("n_batch"),
    xla::ffi::StructMember<int64_t>("flatten_axis"),
    xla::ffi::StructMember<int64_t>("dbias_keep"),
    xla::ffi::StructMember<int64_t>("dbias_split"),
    xla::ffi::StructMember<bool>("rowwise"),
    xla::ffi::StructMember<bool>("colwise"),
    xla::ffi::StructMember<bool>("with_dbias"),
    xla::ffi::StructMember<bool>("dbias_cast"),
    xla::ffi::StructMember<bool>("scale_from_amax"));

namespace eqx_quant {

// Appends the operands above to `binding`: pass Bind() with the thread pool
// context (BindCpuThreadPool, ffi/cpu_thread_pool.h) for the CPU handler, or
// with the platform stream context for the CUDA one.
template <typename Binding>
auto BindFp8QuantizeOperands(Binding binding) {
  return std::move(binding)
      .template Arg<xla::ffi::AnyBuffer>()              // x
      .template Arg<xla::ffi::Buffer<xla::ffi::F32>>()  // scale
      .template Ret<xla::ffi::AnyBuffer>()              // row
      .template Ret<xla::ffi::AnyBuffer>()              // col
      .template Ret<xla::ffi::Buffer<xla::ffi::F32>>()  // scale_inv
      .template Ret<xla::ffi::Buffer<xla::ffi::F32>>()  // amax
      .template Ret<xla::ffi::Buffer<xla::ffi::F32>>()  // dbias
      .template Ret<xla::ffi::AnyBuffer>()              // dbias_cast
      .template Attrs<Fp8QuantizeAttrs>();
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FP8_BINDING_H_
