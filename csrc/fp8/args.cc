#include "fp8/args.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "ffi/dbias_args.h"
#include "ffi/handler_preamble.h"
#include "ffi/operand_text.h"
#include "ffi/operand_types.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

const OperandErrors kErrors("eqx_quant_fp8_quantize");

ffi::ErrorOr<Fp8QuantizeProblem> CheckFp8QuantizeOperands(
    const ffi::AnyBuffer& x, const ffi::Buffer<ffi::F32>& scale,
    const ffi::AnyBuffer& row, const ffi::AnyBuffer& col,
    const ffi::Buffer<ffi::F32>& scale_inv, const ffi::Buffer<ffi::F32>& amax,
    const ffi::Buffer<ffi::F32>& dbias, const ffi::AnyBuffer& dbias_cast,
    const Fp8QuantizeAttrs& attrs) {
  Fp8QuantizeProblem problem;

  // Input element type.
  const std::optional<InputType> input_type = InputTypeOf(x.element_type());
  if (!input_type.has_value()) {
    return kErrors.Fail("x has element type " +
                           DataTypeName(x.element_type()) +
                           " but expected f32, f16 or bf16");
  }
  problem.input_type = *input_type;

  // Attributes and the dbias operands.
  const DbiasAttrs dbias_attrs{attrs.n_batch,    attrs.flatten_axis,
                               attrs.dbias_keep, attrs.dbias_split,
                               attrs.with_dbias, attrs.dbias_cast};
  if (auto error = CheckDbiasOperands(kErrors, x, dbias, dbias_cast,
                                      dbias_attrs, &problem)) {
    return *error;
  }
  const ffi::Span<const int64_t> x_dims = x.dimensions();
  if (!attrs.rowwise && !attrs.colwise && !attrs.with_dbias) {
    return kErrors.Fail(
        "rowwise, colwise and with_dbias are all false; at least one is "
        "required");
  }

  // Shape pieces: B, S[:fa], S[fa:].
  const size_t n_batch = static_cast<size_t>(attrs.n_batch);
  const size_t fa = n_batch + static_cast<size_t>(attrs.flatten_axis);
  const ffi::Span<const int64_t> batch_dims = x_dims.first(n_batch);
  const ffi::Span<const int64_t> row_dims(x_dims.begin() + n_batch,
                                          fa - n_batch);
  const ffi::Span<const int64_t> col_dims = x_dims.last(x_dims.size() - fa);
  const std::vector<int64_t> empty_shape = {0};
  const std::vector<int64_t> one = {1};

  // Per-example operands.
  const std::vector<int64_t> per_example = Concat({batch_dims, one});
  if (auto error =
          kErrors.Shape("scale", scale.dimensions(), per_example, "B + (1,)")) {
    return *error;
  }
  if (auto error = kErrors.Shape("scale_inv", scale_inv.dimensions(), per_example,
                              "B + (1,)")) {
    return *error;
  }
  if (auto error =
          kErrors.Shape("amax", amax.dimensions(), per_example, "B + (1,)")) {
    return *error;
  }

  // Quantized outputs.
  const std::string rowwise_note = "rowwise=" + BoolString(attrs.rowwise);
  const std::string colwise_note = "colwise=" + BoolString(attrs.colwise);
  if (attrs.rowwise) {
    if (auto error = kErrors.Shape("row", row.dimensions(), Concat({x_dims}),
                                "B + S, " + rowwise_note)) {
      return *error;
    }
  } else if (auto error = kErrors.Shape("row", row.dimensions(), empty_shape,
                                     rowwise_note)) {
    return *error;
  }
  if (attrs.colwise) {
    if (auto error = kErrors.Shape(
            "col", col.dimensions(), Concat({batch_dims, col_dims, row_dims}),
            "B + S[flatten_axis:] + S[:flatten_axis], " + colwise_note)) {
      return *error;
    }
  } else if (auto error = kErrors.Shape("col", col.dimensions(), empty_shape,
                                     colwise_note)) {
    return *error;
  }

  // FP8 type: from the enabled quantized outputs.
  const ffi::DataType fp8_type =
      attrs.rowwise ? row.element_type() : col.element_type();
  const char* fp8_source = attrs.rowwise ? "row" : "col";
  std::optional<Fp8Format> format = Fp8FormatOf(fp8_type);
  if (!format.has_value()) {
    return kErrors.Fail(std::string(fp8_source) + " has element type " +
                           DataTypeName(fp8_type) +
                           " but expected f8e4m3fn or f8e5m2");
  }
  if (attrs.rowwise && attrs.colwise && col.element_type() != fp8_type) {
    return kErrors.Fail("col has element type " +
                           DataTypeName(col.element_type()) + " but expected " +
                           DataTypeName(fp8_type) +
                           " (the element type of row)");
  }

  problem.format = *format;
  problem.rowwise = attrs.rowwise;
  problem.colwise = attrs.colwise;
  problem.scale_from_amax = attrs.scale_from_amax;
  return problem;
}

}  // namespace

PreparedCallOr<Fp8QuantizeProblem, Fp8QuantizeBuffers> PrepareFp8Quantize(
    const ffi::AnyBuffer& x, const ffi::Buffer<ffi::F32>& scale,
    const ffi::AnyBuffer& row, const ffi::AnyBuffer& col,
    const ffi::Buffer<ffi::F32>& scale_inv, const ffi::Buffer<ffi::F32>& amax,
    const ffi::Buffer<ffi::F32>& dbias, const ffi::AnyBuffer& dbias_cast,
    const Fp8QuantizeAttrs& attrs) {
  ffi::ErrorOr<Fp8QuantizeProblem> problem = CheckFp8QuantizeOperands(
      x, scale, row, col, scale_inv, amax, dbias, dbias_cast, attrs);
  if (!problem.has_value()) return problem.error();
  Fp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.scale = scale.typed_data();
  buffers.row = DataIf<uint8_t>(problem->rowwise, row);
  buffers.col = DataIf<uint8_t>(problem->colwise, col);
  buffers.scale_inv = scale_inv.typed_data();
  buffers.amax = amax.typed_data();
  buffers.dbias = problem->with_dbias ? dbias.typed_data() : nullptr;
  buffers.dbias_cast = DataIf<void>(problem->dbias_cast, dbias_cast);
  return PreparedCall<Fp8QuantizeProblem, Fp8QuantizeBuffers>{*problem,
                                                               buffers};
}

}  // namespace eqx_quant
