// Validation of the operands of eqx_quant_fp8_quantize and their translation
// into the XLA-free Fp8QuantizeProblem and the kernel's buffers: the preamble
// (ffi/handler_preamble.h) of the CPU and the CUDA handler.

#ifndef EQX_QUANT_CSRC_FP8_ARGS_H_
#define EQX_QUANT_CSRC_FP8_ARGS_H_

#include <cstdint>

#include "common/fp8_quantize_problem.h"
#include "ffi/handler_preamble.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// The attributes of the op, decoded by name (fp8/binding.h; an aggregate:
// its members in the order of the binding's struct decoding).
struct Fp8QuantizeAttrs {
  int64_t n_batch = 0;
  int64_t flatten_axis = 0;
  int64_t dbias_keep = 0;
  int64_t dbias_split = 1;
  bool rowwise = false;
  bool colwise = false;
  bool with_dbias = false;
  bool dbias_cast = false;
  bool scale_from_amax = false;
};

// Checks every rank, dimension and element type against the op's contract
// and returns the problem with the kernel's buffers (row, col, dbias and
// dbias_cast null when absent), or an InvalidArgument error whose message
// starts with "eqx_quant_fp8_quantize: " and names the offending operand with
// its expected and actual shape or type.
PreparedCallOr<Fp8QuantizeProblem, Fp8QuantizeBuffers> PrepareFp8Quantize(
    const xla::ffi::AnyBuffer& x, const xla::ffi::Buffer<xla::ffi::F32>& scale,
    const xla::ffi::AnyBuffer& row, const xla::ffi::AnyBuffer& col,
    const xla::ffi::Buffer<xla::ffi::F32>& scale_inv,
    const xla::ffi::Buffer<xla::ffi::F32>& amax,
    const xla::ffi::Buffer<xla::ffi::F32>& dbias,
    const xla::ffi::AnyBuffer& dbias_cast, const Fp8QuantizeAttrs& attrs);

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FP8_ARGS_H_
