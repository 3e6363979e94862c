// Validation of the operands of eqx_quant_nvfp4_amax and
// eqx_quant_nvfp4_quantize and their translation into the XLA-free problems
// of common/nvfp4_problem.h with the kernels' buffers: the preamble
// (ffi/handler_preamble.h) of the CPU and the CUDA handlers.

#ifndef EQX_QUANT_CSRC_NVFP4_ARGS_H_
#define EQX_QUANT_CSRC_NVFP4_ARGS_H_

#include <cstdint>

#include "common/nvfp4_problem.h"
#include "ffi/handler_preamble.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// The attributes of eqx_quant_nvfp4_amax, decoded by name (nvfp4/binding.h;
// an aggregate: its members in the order of the binding's struct decoding).
struct Nvfp4AmaxAttrs {
  int64_t n_batch = 0;
  int64_t block_axis = -1;
  bool with_rht = false;
  int64_t rht_sign_mask = 0;
};

// The attributes of eqx_quant_nvfp4_quantize, likewise.
struct Nvfp4QuantizeAttrs {
  int64_t n_batch = 0;
  int64_t block_axis = -1;
  bool rowwise = false;
  bool colwise = false;
  bool use_2d = false;
  bool use_rht = false;
  int64_t rht_sign_mask = 0;
  bool stochastic_rounding = false;
  xla::ffi::Span<const int64_t> global_shape;
};

// Each checks every rank, dimension, element type and attribute against the
// op's contract and returns the problem with the kernel's buffers (rht_amax,
// row, row_scale, col and col_scale null when absent), or an InvalidArgument
// error whose message starts with "eqx_quant_nvfp4_amax: " /
// "eqx_quant_nvfp4_quantize: " and names the offending operand with what was
// expected and what was given.
PreparedCallOr<Nvfp4AmaxProblem, Nvfp4AmaxBuffers> PrepareNvfp4Amax(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& amax,
    const xla::ffi::AnyBuffer& rht_amax, const Nvfp4AmaxAttrs& attrs);

PreparedCallOr<Nvfp4QuantizeProblem, Nvfp4QuantizeBuffers>
PrepareNvfp4Quantize(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& amax,
    const xla::ffi::AnyBuffer& col_amax, const xla::ffi::AnyBuffer& key,
    const xla::ffi::AnyBuffer& offset, const xla::ffi::AnyBuffer& row,
    const xla::ffi::AnyBuffer& row_scale, const xla::ffi::AnyBuffer& col,
    const xla::ffi::AnyBuffer& col_scale, const Nvfp4QuantizeAttrs& attrs);

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_NVFP4_ARGS_H_
