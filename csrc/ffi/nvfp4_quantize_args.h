// Validation of the operands of eqx_quant_nvfp4_amax and
// eqx_quant_nvfp4_quantize (shared by the CPU and CUDA handlers) and their
// translation into the XLA-free problems of common/nvfp4_problem.h.

#ifndef EQX_QUANT_CSRC_FFI_NVFP4_QUANTIZE_ARGS_H_
#define EQX_QUANT_CSRC_FFI_NVFP4_QUANTIZE_ARGS_H_

#include <cstdint>

#include "common/nvfp4_problem.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// The attributes of eqx_quant_nvfp4_amax, as bound in nvfp4_binding.h.
struct Nvfp4AmaxAttrs {
  int64_t n_batch = 0;
  int64_t block_axis = -1;
  bool with_rht = false;
  int64_t rht_sign_mask = 0;
};

// The attributes of eqx_quant_nvfp4_quantize, as bound in nvfp4_binding.h.
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

// Check every rank, dimension, element type and attribute against the op's
// contract and return the problem, or an InvalidArgument error whose message
// starts with "eqx_quant_nvfp4_amax: " / "eqx_quant_nvfp4_quantize: " and
// names the offending operand with what was expected and what was given.
xla::ffi::ErrorOr<Nvfp4AmaxProblem> CheckNvfp4AmaxOperands(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& amax,
    const xla::ffi::AnyBuffer& rht_amax, const Nvfp4AmaxAttrs& attrs);

xla::ffi::ErrorOr<Nvfp4QuantizeProblem> CheckNvfp4QuantizeOperands(
    const xla::ffi::AnyBuffer& x, const xla::ffi::AnyBuffer& amax,
    const xla::ffi::AnyBuffer& col_amax, const xla::ffi::AnyBuffer& key,
    const xla::ffi::AnyBuffer& offset, const xla::ffi::AnyBuffer& row,
    const xla::ffi::AnyBuffer& row_scale, const xla::ffi::AnyBuffer& col,
    const xla::ffi::AnyBuffer& col_scale, const Nvfp4QuantizeAttrs& attrs);

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_NVFP4_QUANTIZE_ARGS_H_
