// Text for the FFI layer's operand-validation messages, shared by every op:
// element type names, shapes and booleans as they appear in error messages.

#ifndef EQX_QUANT_CSRC_FFI_OPERAND_TEXT_H_
#define EQX_QUANT_CSRC_FFI_OPERAND_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// "f32", "bf16", "f8e4m3fn", ... ("dtype#N" for types the ops never take).
inline std::string DataTypeName(xla::ffi::DataType type) {
  using xla::ffi::DataType;
  switch (type) {
    case DataType::PRED: return "bool";
    case DataType::S8: return "s8";
    case DataType::S16: return "s16";
    case DataType::S32: return "s32";
    case DataType::S64: return "s64";
    case DataType::U8: return "u8";
    case DataType::U16: return "u16";
    case DataType::U32: return "u32";
    case DataType::U64: return "u64";
    case DataType::F16: return "f16";
    case DataType::BF16: return "bf16";
    case DataType::F32: return "f32";
    case DataType::F64: return "f64";
    case DataType::F8E4M3FN: return "f8e4m3fn";
    case DataType::F8E5M2: return "f8e5m2";
    default: return "dtype#" + std::to_string(static_cast<int>(type));
  }
}

// "[2,3,4]".
inline std::string ShapeString(xla::ffi::Span<const int64_t> dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) text += ",";
    text += std::to_string(dims[i]);
  }
  return text + "]";
}

inline std::string BoolString(bool value) { return value ? "true" : "false"; }

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_OPERAND_TEXT_H_
