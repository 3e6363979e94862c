#include "fp8_block/args.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/fp8_block_problem.h"
#include "common/fp8_format.h"
#include "ffi/handler_preamble.h"
#include "ffi/operand_text.h"
#include "ffi/operand_types.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

const OperandErrors kErrors("eqx_quant_fp8_block_quantize");

}  // namespace

std::optional<ffi::Error> CheckAmaxEpsilon(const OperandErrors& errors,
                                           float amax_epsilon) {
  if (amax_epsilon >= 0.0f && FloatToBits(amax_epsilon) < 0x7F800000u) {
    return std::nullopt;
  }
  return errors.Fail("amax_epsilon=" + std::to_string(amax_epsilon) +
                     " but expected a finite value >= 0");
}

ffi::ErrorOr<Fp8BlockQuantizeCall> PrepareFp8BlockQuantize(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& row,
    const ffi::AnyBuffer& row_scale, const ffi::AnyBuffer& col,
    const ffi::AnyBuffer& col_scale, const Fp8BlockQuantizeAttrs& attrs) {
  Fp8BlockQuantizeProblem p;
  const std::optional<InputType> input_type = InputTypeOf(x.element_type());
  if (!input_type.has_value()) {
    return kErrors.Fail("x has element type " + DataTypeName(x.element_type()) +
                        " but expected f32, f16 or bf16");
  }
  const ffi::Span<const int64_t> dims = x.dimensions();
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t nb = attrs.n_batch;
  if (nb < 0 || nb >= rank) {
    return kErrors.Fail("n_batch=" + std::to_string(nb) + " but x has shape " +
                        ShapeString(dims) + " (expected 0 <= n_batch < rank)");
  }
  const int64_t fa = attrs.flatten_axis;
  if (fa < 0 || fa > rank - nb) {
    return kErrors.Fail("flatten_axis=" + std::to_string(fa) +
                        " but expected 0 <= flatten_axis <= " +
                        std::to_string(rank - nb) + " for x of shape " +
                        ShapeString(dims) + " with n_batch=" + std::to_string(nb));
  }
  if (!attrs.rowwise && !attrs.colwise) {
    return kErrors.Fail("rowwise and colwise are both false; at least one is required");
  }
  if (auto e = CheckAmaxEpsilon(kErrors, attrs.amax_epsilon)) return *e;

  const std::vector<int64_t> batch(dims.begin(), dims.begin() + nb);
  const std::vector<int64_t> before(dims.begin() + nb, dims.begin() + nb + fa);
  const std::vector<int64_t> after(dims.begin() + nb + fa, dims.end());
  p.input_type = *input_type;
  p.batch = Product(ffi::Span<const int64_t>(batch));
  p.rows = Product(ffi::Span<const int64_t>(before));
  p.cols = Product(ffi::Span<const int64_t>(after));
  p.rowwise = attrs.rowwise;
  p.colwise = attrs.colwise;
  p.use_2d = attrs.use_2d;
  p.power_2_scales = attrs.power_2_scales;
  p.amax_epsilon = attrs.amax_epsilon;
  p.input_max = Fp8BlockInputMax(p.input_type);

  const std::vector<int64_t> empty = {0};
  const std::vector<int64_t> x_shape(dims.begin(), dims.end());
  const int64_t row_scale_rows = attrs.use_2d ? Fp8Blocks(p.rows) : p.rows;
  const int64_t col_scale_rows = attrs.use_2d ? Fp8Blocks(p.cols) : p.cols;
  const std::string blocks = attrs.use_2d ? "128x128 tiles" : "1x128 blocks";
  std::vector<int64_t> row_scale_shape = batch;
  row_scale_shape.insert(row_scale_shape.end(), {row_scale_rows, Fp8Blocks(p.cols)});
  std::vector<int64_t> col_shape = batch;
  col_shape.insert(col_shape.end(), after.begin(), after.end());
  col_shape.insert(col_shape.end(), before.begin(), before.end());
  std::vector<int64_t> col_scale_shape = batch;
  col_scale_shape.insert(col_scale_shape.end(), {col_scale_rows, Fp8Blocks(p.rows)});
  if (auto e = kErrors.Shape("row", row.dimensions(), attrs.rowwise ? x_shape : empty,
                             attrs.rowwise ? "x's shape" : "rowwise=false")) {
    return *e;
  }
  if (auto e = kErrors.Shape("row_scale", row_scale.dimensions(),
                             attrs.rowwise ? row_scale_shape : empty,
                             attrs.rowwise ? "one scale per " + blocks : "rowwise=false")) {
    return *e;
  }
  if (auto e = kErrors.Shape("col", col.dimensions(), attrs.colwise ? col_shape : empty,
                             attrs.colwise ? "S[fa:] + S[:fa]" : "colwise=false")) {
    return *e;
  }
  if (auto e = kErrors.Shape("col_scale", col_scale.dimensions(),
                             attrs.colwise ? col_scale_shape : empty,
                             attrs.colwise ? "one scale per " + blocks : "colwise=false")) {
    return *e;
  }
  const ffi::DataType fp8_type = attrs.rowwise ? row.element_type() : col.element_type();
  const std::optional<Fp8Format> format = Fp8FormatOf(fp8_type);
  if (!format.has_value()) {
    return kErrors.Fail(std::string(attrs.rowwise ? "row" : "col") + " has element type " +
                        DataTypeName(fp8_type) + " but expected f8e4m3fn or f8e5m2");
  }
  p.format = *format;
  if (attrs.rowwise && attrs.colwise) {
    if (auto e = kErrors.Type("col", col.element_type(), fp8_type,
                              DataTypeName(fp8_type) + " (the element type of row)")) {
      return *e;
    }
  }
  if (attrs.rowwise) {
    if (auto e = kErrors.Type("row_scale", row_scale.element_type(), ffi::DataType::F32,
                              "f32")) {
      return *e;
    }
  }
  if (attrs.colwise) {
    if (auto e = kErrors.Type("col_scale", col_scale.element_type(), ffi::DataType::F32,
                              "f32")) {
      return *e;
    }
  }

  Fp8BlockQuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.row = DataIf<uint8_t>(attrs.rowwise, row);
  buffers.row_scale = DataIf<float>(attrs.rowwise, row_scale);
  buffers.col = DataIf<uint8_t>(attrs.colwise, col);
  buffers.col_scale = DataIf<float>(attrs.colwise, col_scale);
  return Fp8BlockQuantizeCall{p, buffers};
}

}  // namespace eqx_quant
