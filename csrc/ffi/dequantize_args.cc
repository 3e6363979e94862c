#include "ffi/dequantize_args.h"

#include <cstdint>
#include <optional>
#include <string>

#include "common/grouped_layout.h"
#include "ffi/operand_types.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error Invalid(const char* target, const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(target) + ": " + what);
}

bool HasDims(ffi::AnyBuffer::Dimensions dims, int64_t d0, int64_t d1, int64_t d2) {
  return dims.size() == 3 && dims[0] == d0 && dims[1] == d1 && dims[2] == d2;
}

bool IsValueType(ffi::DataType type) {
  return type == ffi::DataType::BF16 || type == ffi::DataType::F32;
}

}  // namespace

ffi::ErrorOr<Mxfp8DequantizeProblem> PrepareMxfp8Dequantize(const char* target,
                                                             const ffi::AnyBuffer& data,
                                                             const ffi::AnyBuffer& scales,
                                                             ffi::AnyBuffer& out) {
  if (data.dimensions().size() != 3) return Invalid(target, "data must be 3-D (A, L, B)");
  Mxfp8DequantizeProblem p;
  const std::optional<Fp8Format> format = Fp8FormatOf(data.element_type());
  if (!format.has_value()) return Invalid(target, "data must be F8E4M3FN or F8E5M2");
  p.format = *format;
  p.a = data.dimensions()[0];
  p.l = data.dimensions()[1];
  p.b = data.dimensions()[2];
  if (scales.element_type() != ffi::DataType::U8 ||
      !HasDims(scales.dimensions(), p.a, (p.l + 31) / 32, p.b)) {
    return Invalid(target, "scales must be U8 (A, ceil(L/32), B)");
  }
  if (!IsValueType(out.element_type())) return Invalid(target, "out must be BF16 or F32");
  if (!HasDims(out.dimensions(), p.a, p.l, p.b)) return Invalid(target, "out must be (A, L, B)");
  p.out_f32 = out.element_type() == ffi::DataType::F32;
  p.data = static_cast<const uint8_t*>(data.untyped_data());
  p.scales = static_cast<const uint8_t*>(scales.untyped_data());
  p.out = out.untyped_data();
  return p;
}

ffi::ErrorOr<Nvfp4DequantizeProblem> PrepareNvfp4Dequantize(const char* target,
                                                             const ffi::AnyBuffer& codes,
                                                             const ffi::AnyBuffer& scales,
                                                             const ffi::AnyBuffer& decode_scales,
                                                             ffi::AnyBuffer& out) {
  const auto dims = codes.dimensions();
  if (codes.element_type() != ffi::DataType::F4E2M1FN || dims.size() != 2) {
    return Invalid(target, "codes must be F4E2M1FN (A, L)");
  }
  Nvfp4DequantizeProblem p;
  p.rows = dims[0];
  p.cols = dims[1];
  const auto s = scales.dimensions();
  if (scales.element_type() != ffi::DataType::U8 || s.size() != 2 || s[0] != p.rows ||
      s[1] != (p.cols + 15) / 16) {
    return Invalid(target, "scales must be U8 (A, ceil(L/16))");
  }
  const auto e = decode_scales.dimensions();
  if (decode_scales.element_type() != ffi::DataType::F32 || e.size() != 1 || e[0] < 1 ||
      p.rows % e[0] != 0) {
    return Invalid(target, "decode_scales must be F32 (E,) with E >= 1 dividing A");
  }
  p.examples = e[0];
  const auto o = out.dimensions();
  if (!IsValueType(out.element_type()) || o.size() != 2 || o[0] != p.rows || o[1] != p.cols) {
    return Invalid(target, "out must be BF16 or F32 (A, L)");
  }
  p.out_f32 = out.element_type() == ffi::DataType::F32;
  p.codes = static_cast<const uint8_t*>(codes.untyped_data());
  p.scales = static_cast<const uint8_t*>(scales.untyped_data());
  p.decode_scales = static_cast<const float*>(decode_scales.untyped_data());
  p.out = out.untyped_data();
  return p;
}

ffi::ErrorOr<GroupedMxfp8DequantizeProblem> PrepareGroupedMxfp8Dequantize(
    const char* target, const ffi::AnyBuffer& data, const ffi::AnyBuffer& scales,
    const ffi::AnyBuffer& sizes, ffi::AnyBuffer& out, int64_t rows_per_unit) {
  if (data.dimensions().size() != 2) return Invalid(target, "data must be 2-D (R, N)");
  GroupedMxfp8DequantizeProblem p;
  const std::optional<Fp8Format> format = Fp8FormatOf(data.element_type());
  if (!format.has_value()) return Invalid(target, "data must be F8E4M3FN or F8E5M2");
  p.format = *format;
  p.rows = data.dimensions()[0];
  p.cols = data.dimensions()[1];
  if (sizes.element_type() != ffi::DataType::S32 || sizes.dimensions().size() != 1 ||
      sizes.element_count() == 0) {
    return Invalid(target, "sizes must be S32 (G,) with G >= 1");
  }
  p.groups = static_cast<int64_t>(sizes.element_count());
  if (rows_per_unit < 1 || p.rows % rows_per_unit != 0) {
    return Invalid(target, "rows_per_unit must be >= 1 and divide R");
  }
  p.rows_per_unit = rows_per_unit;
  const int64_t needed = grouped::ScaleBufferBytes(grouped::ScalePart::kRowwise, p.rows, p.cols,
                                                   p.groups, grouped::kMxfp8Block);
  if (scales.element_type() != ffi::DataType::U8 ||
      static_cast<int64_t>(scales.element_count()) != needed) {
    return Invalid(target,
                   "scales must be U8 of the rowwise buffer's length " + std::to_string(needed));
  }
  const auto o = out.dimensions();
  if (out.element_type() != ffi::DataType::BF16 || o.size() != 2 || o[0] != p.rows ||
      o[1] != p.cols) {
    return Invalid(target, "out must be BF16 (R, N)");
  }
  p.data = static_cast<const uint8_t*>(data.untyped_data());
  p.scales = static_cast<const uint8_t*>(scales.untyped_data());
  p.sizes = static_cast<const int32_t*>(sizes.untyped_data());
  p.out = static_cast<uint16_t*>(out.untyped_data());
  return p;
}

}  // namespace eqx_quant
