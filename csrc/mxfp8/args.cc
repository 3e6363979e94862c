#include "mxfp8/args.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "common/mxfp8_problem.h"
#include "ffi/dbias_args.h"
#include "ffi/handler_preamble.h"
#include "ffi/operand_text.h"
#include "ffi/operand_types.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

const OperandErrors kErrors("eqx_quant_mxfp8_quantize");

// The MXFP8 problem; `dbias` gets the bias gradient's part as a dbias-only
// FP8 problem (with_dbias false without it).
ffi::ErrorOr<Mxfp8QuantizeProblem> CheckMxfp8QuantizeOperands(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& row,
    const ffi::AnyBuffer& row_scale, const ffi::AnyBuffer& col,
    const ffi::AnyBuffer& col_scale, const ffi::Buffer<ffi::F32>& dbias_nodes,
    const ffi::AnyBuffer& dbias_cast, const Mxfp8QuantizeAttrs& attrs,
    Fp8QuantizeProblem* dbias) {
  Mxfp8QuantizeProblem problem;

  // Input.
  const std::optional<InputType> input_type = InputTypeOf(x.element_type());
  if (!input_type.has_value()) {
    return kErrors.Fail("x has element type " +
                           DataTypeName(x.element_type()) +
                           " but expected f32, f16 or bf16");
  }
  const ffi::Span<const int64_t> x_dims = x.dimensions();
  const int64_t rank = static_cast<int64_t>(x_dims.size());
  if (rank < 1) {
    return kErrors.Fail("x has shape " + ShapeString(x_dims) +
                           " but expected rank >= 1");
  }

  // Attributes.
  if (!attrs.rowwise && !attrs.colwise) {
    return kErrors.Fail(
        "rowwise and colwise are both false; at least one is required");
  }
  if (attrs.colwise && (attrs.block_axis < 0 || attrs.block_axis > rank - 2)) {
    return kErrors.Fail(
        "block_axis=" + std::to_string(attrs.block_axis) +
        " but expected 0 <= block_axis <= rank - 2 = " +
        std::to_string(rank - 2) + " for x of shape " + ShapeString(x_dims) +
        " with colwise=true (colwise blocks need an axis before the last)");
  }
  if (!attrs.colwise && attrs.block_axis != -1) {
    return kErrors.Fail("block_axis=" + std::to_string(attrs.block_axis) +
                           " but expected -1 with colwise=false");
  }

  const std::vector<int64_t> x_shape(x_dims.begin(), x_dims.end());
  const std::vector<int64_t> empty_shape = {0};
  const int64_t last = x_dims[rank - 1];

  // Rowwise outputs.
  const std::string rowwise_note = "rowwise=" + BoolString(attrs.rowwise);
  std::vector<int64_t> row_scale_shape = x_shape;
  row_scale_shape.back() = Mxfp8Blocks(last);
  const std::vector<int64_t>& row_expected =
      attrs.rowwise ? x_shape : empty_shape;
  const std::vector<int64_t>& row_scale_expected =
      attrs.rowwise ? row_scale_shape : empty_shape;
  if (auto error = kErrors.Shape(
          "row", row.dimensions(), row_expected,
          attrs.rowwise ? "x's shape, " + rowwise_note : rowwise_note)) {
    return *error;
  }
  if (auto error = kErrors.Shape("row_scale", row_scale.dimensions(),
                              row_scale_expected,
                              attrs.rowwise ? "x.shape[:-1] + (ceil(L/32),), " +
                                                  rowwise_note
                                            : rowwise_note)) {
    return *error;
  }

  // Colwise outputs.
  const std::string colwise_note = "colwise=" + BoolString(attrs.colwise);
  std::vector<int64_t> col_scale_shape = x_shape;
  if (attrs.colwise) {
    col_scale_shape[attrs.block_axis] =
        Mxfp8Blocks(x_dims[attrs.block_axis]);
  }
  const std::vector<int64_t>& col_expected =
      attrs.colwise ? x_shape : empty_shape;
  const std::vector<int64_t>& col_scale_expected =
      attrs.colwise ? col_scale_shape : empty_shape;
  if (auto error = kErrors.Shape(
          "col", col.dimensions(), col_expected,
          attrs.colwise ? "x's shape, " + colwise_note : colwise_note)) {
    return *error;
  }
  if (auto error = kErrors.Shape(
          "col_scale", col_scale.dimensions(), col_scale_expected,
          attrs.colwise ? "x's shape with dim block_axis=" +
                              std::to_string(attrs.block_axis) +
                              " replaced by ceil(K/32), " + colwise_note
                        : colwise_note)) {
    return *error;
  }

  // Element types of the enabled outputs: one FP8 type, U8 scales.
  const ffi::DataType fp8_type =
      attrs.rowwise ? row.element_type() : col.element_type();
  const char* fp8_source = attrs.rowwise ? "row" : "col";
  const std::optional<Fp8Format> format = Fp8FormatOf(fp8_type);
  if (!format.has_value()) {
    return kErrors.Fail(std::string(fp8_source) + " has element type " +
                           DataTypeName(fp8_type) +
                           " but expected f8e4m3fn or f8e5m2");
  }
  if (attrs.rowwise && attrs.colwise) {
    if (auto error = kErrors.Type("col", col.element_type(), fp8_type,
                               DataTypeName(fp8_type) +
                                   " (the element type of row)")) {
      return *error;
    }
  }
  if (attrs.rowwise) {
    if (auto error = kErrors.Type("row_scale", row_scale.element_type(),
                               ffi::DataType::U8, "u8 (E8M0 bytes)")) {
      return *error;
    }
  }
  if (attrs.colwise) {
    if (auto error = kErrors.Type("col_scale", col_scale.element_type(),
                               ffi::DataType::U8, "u8 (E8M0 bytes)")) {
      return *error;
    }
  }

  // The bias gradient: one tree per example (prod(S[:dbias_keep]) == 1) over
  // at most one reduced axis longer than 1.
  const DbiasAttrs dbias_attrs{attrs.n_batch,    attrs.flatten_axis,
                               attrs.dbias_keep, attrs.dbias_split,
                               attrs.with_dbias, attrs.dbias_cast,
                               kMaxMxfp8DbiasSplit};
  if (auto error = CheckDbiasOperands(kErrors, x, dbias_nodes, dbias_cast,
                                      dbias_attrs, dbias)) {
    return *error;
  }
  if (attrs.with_dbias) {
    int64_t long_axes = 0;
    for (int64_t d : dbias->dbias_reduced_dims) long_axes += d > 1 ? 1 : 0;
    if (dbias->dbias_kept_rows != 1 || long_axes > 1) {
      return kErrors.Fail(
          "with_dbias=true needs one dbias tree per example over at most one "
          "axis longer than 1, but x of shape " + ShapeString(x_dims) +
          " with n_batch=" + std::to_string(attrs.n_batch) +
          ", flatten_axis=" + std::to_string(attrs.flatten_axis) +
          ", dbias_keep=" + std::to_string(attrs.dbias_keep) + " keeps " +
          std::to_string(dbias->dbias_kept_rows) + " rows and reduces " +
          std::to_string(long_axes) +
          " such axes; take that dbias from eqx_quant_fp8_quantize (its "
          "dbias-only form)");
    }
  }
  dbias->input_type = *input_type;
  dbias->format = *format;

  // The (A, K, C, L) view.
  problem.input_type = *input_type;
  problem.format = *format;
  problem.rowwise = attrs.rowwise;
  problem.colwise = attrs.colwise;
  problem.last = last;
  if (attrs.colwise) {
    const size_t axis = static_cast<size_t>(attrs.block_axis);
    problem.outer = Product(x_dims.first(axis));
    problem.blocked = x_dims[axis];
    problem.inner = Product(ffi::Span<const int64_t>(
        x_dims.begin() + axis + 1, x_dims.size() - axis - 2));
  } else {
    problem.outer = Product(x_dims.first(x_dims.size() - 1));
    problem.blocked = 1;
    problem.inner = 1;
  }
  return problem;
}

}  // namespace

ffi::ErrorOr<Mxfp8QuantizeCall> PrepareMxfp8Quantize(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& row,
    const ffi::AnyBuffer& row_scale, const ffi::AnyBuffer& col,
    const ffi::AnyBuffer& col_scale, const ffi::Buffer<ffi::F32>& dbias_nodes,
    const ffi::AnyBuffer& dbias_cast, const Mxfp8QuantizeAttrs& attrs) {
  Mxfp8QuantizeCall call;
  ffi::ErrorOr<Mxfp8QuantizeProblem> problem = CheckMxfp8QuantizeOperands(
      x, row, row_scale, col, col_scale, dbias_nodes, dbias_cast, attrs,
      &call.dbias.problem);
  if (!problem.has_value()) return problem.error();
  call.mx.problem = *problem;
  Mxfp8QuantizeBuffers& mx = call.mx.buffers;
  mx.x = x.untyped_data();
  mx.row = DataIf<uint8_t>(problem->rowwise, row);
  mx.row_scale = DataIf<uint8_t>(problem->rowwise, row_scale);
  mx.col = DataIf<uint8_t>(problem->colwise, col);
  mx.col_scale = DataIf<uint8_t>(problem->colwise, col_scale);
  const Fp8QuantizeProblem& dbias = call.dbias.problem;
  Fp8QuantizeBuffers& sums = call.dbias.buffers;
  sums.x = mx.x;
  sums.dbias = dbias.with_dbias ? dbias_nodes.typed_data() : nullptr;
  sums.dbias_cast = DataIf<void>(dbias.dbias_cast, dbias_cast);
  return call;
}

}  // namespace eqx_quant
