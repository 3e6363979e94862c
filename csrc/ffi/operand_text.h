// Text for the FFI layer's operand-validation messages, shared by every op:
// element type names, shapes and booleans as they appear in error messages,
// and OperandErrors, which builds one op's InvalidArgument errors.

#ifndef EQX_QUANT_CSRC_FFI_OPERAND_TEXT_H_
#define EQX_QUANT_CSRC_FFI_OPERAND_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
    case DataType::F4E2M1FN: return "f4e2m1fn";
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

// The InvalidArgument errors of one op: every message starts with "<op>: ".
class OperandErrors {
 public:
  explicit OperandErrors(const char* op) : prefix_(std::string(op) + ": ") {}

  xla::ffi::Error Fail(const std::string& message) const {
    return xla::ffi::Error::InvalidArgument(prefix_ + message);
  }

  // Error if `dims` differs from `expected`; `what` says how `expected` was
  // derived, for the message.
  std::optional<xla::ffi::Error> Shape(const char* name,
                                       xla::ffi::Span<const int64_t> dims,
                                       const std::vector<int64_t>& expected,
                                       const std::string& what) const {
    if (dims == xla::ffi::Span<const int64_t>(expected)) return std::nullopt;
    return Fail(std::string(name) + " has shape " + ShapeString(dims) +
                " but expected " + ShapeString(expected) + " (" + what + ")");
  }

  // Error if `type` differs from `expected`; `what` names the expectation.
  std::optional<xla::ffi::Error> Type(const char* name,
                                      xla::ffi::DataType type,
                                      xla::ffi::DataType expected,
                                      const std::string& what) const {
    if (type == expected) return std::nullopt;
    return Fail(std::string(name) + " has element type " +
                DataTypeName(type) + " but expected " + what);
  }

  // Error unless `buffer` has element type `type` and shape `expected`.
  std::optional<xla::ffi::Error> Operand(const char* name,
                                         const xla::ffi::AnyBuffer& buffer,
                                         xla::ffi::DataType type,
                                         const std::vector<int64_t>& expected,
                                         const std::string& what) const {
    if (auto error =
            Type(name, buffer.element_type(), type, DataTypeName(type))) {
      return error;
    }
    return Shape(name, buffer.dimensions(), expected, what);
  }

 private:
  std::string prefix_;
};

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_OPERAND_TEXT_H_
