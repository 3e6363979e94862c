// Operand validation of eqx_quant_group_sizes_check, shared by its CPU and
// CUDA handlers: int32 sizes of rank >= 1 and an int32 result of their size.

#ifndef EQX_QUANT_GROUPED_SIZES_CHECK_ARGS_H_
#define EQX_QUANT_GROUPED_SIZES_CHECK_ARGS_H_

#include <string>

#include "xla/ffi/api/ffi.h"

namespace eqx_quant::sizes_check {

inline xla::ffi::Error CheckOperands(const char* target, const xla::ffi::AnyBuffer& sizes,
                                     const xla::ffi::AnyBuffer& out) {
  namespace ffi = xla::ffi;
  if (sizes.element_type() != ffi::DataType::S32 || out.element_type() != ffi::DataType::S32 ||
      sizes.dimensions().size() == 0 || out.element_count() != sizes.element_count()) {
    return ffi::Error::InvalidArgument(
        std::string(target) +
        ": group_sizes must be an int32 array of rank >= 1 and the result an int32 array of "
        "its size.");
  }
  return ffi::Error::Success();
}

}  // namespace eqx_quant::sizes_check

#endif  // EQX_QUANT_GROUPED_SIZES_CHECK_ARGS_H_
