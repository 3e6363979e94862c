// Element types and shape arithmetic of the FFI layer's operand checks,
// shared by every op: the input and FP8 types the kernels take, and products
// and concatenations of dimension lists.

#ifndef EQX_QUANT_CSRC_FFI_OPERAND_TYPES_H_
#define EQX_QUANT_CSRC_FFI_OPERAND_TYPES_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"  // InputType
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// The high-precision input types (f32, f16, bf16); nullopt for any other.
inline std::optional<InputType> InputTypeOf(xla::ffi::DataType type) {
  switch (type) {
    case xla::ffi::DataType::F32: return InputType::kF32;
    case xla::ffi::DataType::F16: return InputType::kF16;
    case xla::ffi::DataType::BF16: return InputType::kBF16;
    default: return std::nullopt;
  }
}

// The FP8 payload types (e4m3fn, e5m2); nullopt for any other.
inline std::optional<Fp8Format> Fp8FormatOf(xla::ffi::DataType type) {
  switch (type) {
    case xla::ffi::DataType::F8E4M3FN: return Fp8Format::kE4M3Fn;
    case xla::ffi::DataType::F8E5M2: return Fp8Format::kE5M2;
    default: return std::nullopt;
  }
}

inline int64_t Product(xla::ffi::Span<const int64_t> dims) {
  int64_t product = 1;
  for (int64_t dim : dims) product *= dim;
  return product;
}

inline std::vector<int64_t> Concat(
    std::initializer_list<xla::ffi::Span<const int64_t>> parts) {
  std::vector<int64_t> out;
  for (auto part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

// Whether an operand that only stochastic rounding reads (NVFP4 key words,
// index offset) is passed empty (last dim 0) where it is not read: its
// expected shape then ends in 0 instead of its full length.
inline bool EmptyWithoutSr(const xla::ffi::AnyBuffer& operand,
                           bool stochastic_rounding) {
  const auto dims = operand.dimensions();
  return !stochastic_rounding && dims.size() > 0 && dims.back() == 0;
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_OPERAND_TYPES_H_
