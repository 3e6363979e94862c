#include "grouped/args.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/fp8_block_problem.h"
#include "common/fp8_format.h"
#include "common/fp8_quantize_problem.h"
#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "ffi/handler_preamble.h"
#include "fp8_block/args.h"
#include "ffi/operand_text.h"
#include "ffi/operand_types.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

using Dims = ffi::Span<const int64_t>;
using grouped::ScaleBufferBytes;
using grouped::ScalePart;

// The errors of one op, plus a check of an optional output.
class Checker : public OperandErrors {
 public:
  using OperandErrors::OperandErrors;

  // An optional output: `expected` (derived as `what`) when `enabled`, else
  // (0,); `note` ("rowwise=true", ...) ends the message either way.
  std::optional<ffi::Error> Part(const char* name, const ffi::AnyBuffer& buffer,
                                 bool enabled,
                                 const std::vector<int64_t>& expected,
                                 const std::string& what,
                                 const std::string& note) const {
    static const std::vector<int64_t> kEmpty = {0};
    return Shape(name, buffer.dimensions(), enabled ? expected : kEmpty,
                 enabled ? what + ", " + note : note);
  }
};

// The grouped view of x and group_sizes, and the batch dims Bt.
struct ViewAndBatch {
  GroupedView view;
  std::vector<int64_t> batch;
};

ffi::ErrorOr<ViewAndBatch> CheckView(const Checker& check,
                                     const ffi::AnyBuffer& x,
                                     const ffi::AnyBuffer& group_sizes,
                                     int64_t n_batch, int64_t rows_per_unit) {
  ViewAndBatch out;
  const std::optional<InputType> input_type = InputTypeOf(x.element_type());
  if (!input_type.has_value()) {
    return check.Fail("x has element type " + DataTypeName(x.element_type()) +
                      " but expected f32, f16 or bf16");
  }
  out.view.input_type = *input_type;
  const Dims dims = x.dimensions();
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (n_batch < 0) {
    return check.Fail("n_batch=" + std::to_string(n_batch) +
                      " but expected n_batch >= 0");
  }
  if (rank != n_batch + 2) {
    return check.Fail("x has shape " + ShapeString(dims) + " (rank " +
                      std::to_string(rank) + ") but expected rank n_batch + 2 = " +
                      std::to_string(n_batch + 2) +
                      " (Bt + (R, N), n_batch=" + std::to_string(n_batch) + ")");
  }
  if (rows_per_unit < 1) {
    return check.Fail("rows_per_unit=" + std::to_string(rows_per_unit) +
                      " but expected rows_per_unit >= 1");
  }
  const size_t nb = static_cast<size_t>(n_batch);
  const Dims batch = dims.first(nb);
  out.batch.assign(batch.begin(), batch.end());

  if (auto error = check.Type("group_sizes", group_sizes.element_type(),
                              ffi::DataType::S32, "s32")) {
    return *error;
  }
  const Dims sizes_dims = group_sizes.dimensions();
  if (sizes_dims.size() != nb + 1) {
    return check.Fail("group_sizes has shape " + ShapeString(sizes_dims) +
                      " but expected rank n_batch + 1 = " +
                      std::to_string(n_batch + 1) + " (Bt + (G,))");
  }
  const int64_t groups = sizes_dims[nb];
  if (groups < 1) {
    return check.Fail("group_sizes has shape " + ShapeString(sizes_dims) +
                      " but expected at least one group (G >= 1)");
  }
  const std::vector<int64_t> g = {groups};
  if (auto error = check.Shape("group_sizes", sizes_dims, Concat({batch, g}),
                               "Bt + (G,), Bt = x's batch dims")) {
    return *error;
  }

  out.view.batch = Product(batch);
  out.view.rows = dims[nb];
  out.view.cols = dims[nb + 1];
  out.view.groups = groups;
  out.view.rows_per_unit = rows_per_unit;
  return out;
}

std::optional<ffi::Error> CheckSomePart(const Checker& check,
                                        const GroupedQuantizeAttrs& attrs) {
  if (!attrs.rowwise && !attrs.colwise) {
    return check.Fail(
        "rowwise and colwise are both false; at least one is required");
  }
  return std::nullopt;
}

// The FP8 type of the enabled data outputs (row's if rowwise, else col's; col
// must match row when both are enabled).
ffi::ErrorOr<Fp8Format> CheckFp8Type(const Checker& check,
                                     const ffi::AnyBuffer& row,
                                     const ffi::AnyBuffer& col,
                                     const GroupedQuantizeAttrs& attrs) {
  const ffi::DataType fp8_type =
      attrs.rowwise ? row.element_type() : col.element_type();
  const std::optional<Fp8Format> format = Fp8FormatOf(fp8_type);
  if (!format.has_value()) {
    return check.Fail(std::string(attrs.rowwise ? "row" : "col") +
                      " has element type " + DataTypeName(fp8_type) +
                      " but expected f8e4m3fn or f8e5m2");
  }
  if (attrs.rowwise && attrs.colwise) {
    if (auto error = check.Type("col", col.element_type(), fp8_type,
                                DataTypeName(fp8_type) +
                                    " (the element type of row)")) {
      return *error;
    }
  }
  return *format;
}

// Checks the two scale buffers of a block format (u8, Bt + (Lr,) / (Lc,)) and
// returns their lengths {Lr, Lc} (0 for a disabled part).
ffi::ErrorOr<std::pair<int64_t, int64_t>> CheckScaleBuffers(
    const Checker& check, const ViewAndBatch& vb,
    const ffi::AnyBuffer& row_scale, const ffi::AnyBuffer& col_scale,
    const GroupedQuantizeAttrs& attrs, int64_t block, const char* bytes_kind) {
  const GroupedView& v = vb.view;
  const std::string b = std::to_string(block);
  const int64_t row_bytes =
      attrs.rowwise
          ? ScaleBufferBytes(ScalePart::kRowwise, v.rows, v.cols, v.groups,
                             block)
          : 0;
  const int64_t col_bytes =
      attrs.colwise
          ? ScaleBufferBytes(ScalePart::kColwise, v.rows, v.cols, v.groups,
                             block)
          : 0;
  const std::vector<int64_t> lr = {row_bytes};
  const std::vector<int64_t> lc = {col_bytes};
  const std::string sizes = "R=" + std::to_string(v.rows) +
                            ", N=" + std::to_string(v.cols) +
                            ", G=" + std::to_string(v.groups);
  const std::string u8 = std::string("u8 (") + bytes_kind + " bytes)";
  if (attrs.rowwise) {
    if (auto error = check.Type("row_scale", row_scale.element_type(),
                                ffi::DataType::U8, u8)) {
      return *error;
    }
  }
  if (auto error = check.Part(
          "row_scale", row_scale, attrs.rowwise, Concat({vb.batch, lr}),
          "Bt + (Lr,), Lr = 128 * pad4(ceil(N/" + b + ")) * W(R, G, 128), " +
              sizes,
          "rowwise=" + BoolString(attrs.rowwise))) {
    return *error;
  }
  if (attrs.colwise) {
    if (auto error = check.Type("col_scale", col_scale.element_type(),
                                ffi::DataType::U8, u8)) {
      return *error;
    }
  }
  if (auto error = check.Part(
          "col_scale", col_scale, attrs.colwise, Concat({vb.batch, lc}),
          "Bt + (Lc,), Lc = pad128(N) * 4 * W(R, G, " +
              std::to_string(4 * block) + "), " + sizes,
          "colwise=" + BoolString(attrs.colwise))) {
    return *error;
  }
  return std::make_pair(row_bytes, col_bytes);
}

ffi::ErrorOr<GroupedFp8QuantizeProblem> CheckGroupedFp8QuantizeOperands(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& scale,
    const ffi::AnyBuffer& group_sizes, const ffi::AnyBuffer& row,
    const ffi::AnyBuffer& col, const ffi::AnyBuffer& scale_inv,
    const ffi::AnyBuffer& amax, const GroupedQuantizeAttrs& attrs) {
  const Checker check("eqx_quant_grouped_fp8_quantize");
  if (auto error = CheckSomePart(check, attrs)) return *error;
  ffi::ErrorOr<ViewAndBatch> vb =
      CheckView(check, x, group_sizes, attrs.n_batch, attrs.rows_per_unit);
  if (!vb.has_value()) return vb.error();
  const GroupedView& v = vb->view;
  const std::vector<int64_t> g = {v.groups};
  const std::vector<int64_t> per_group = Concat({vb->batch, g});
  if (auto error = check.Operand("scale", scale, ffi::DataType::F32, per_group,
                                 "Bt + (G,)")) {
    return *error;
  }
  const std::vector<int64_t> rn = {v.rows, v.cols};
  const std::vector<int64_t> flat = {v.rows * v.cols};
  if (auto error = check.Part("row", row, attrs.rowwise,
                              Concat({vb->batch, rn}), "Bt + (R, N)",
                              "rowwise=" + BoolString(attrs.rowwise))) {
    return *error;
  }
  if (auto error = check.Part("col", col, attrs.colwise,
                              Concat({vb->batch, flat}), "Bt + (R*N,)",
                              "colwise=" + BoolString(attrs.colwise))) {
    return *error;
  }
  ffi::ErrorOr<Fp8Format> format = CheckFp8Type(check, row, col, attrs);
  if (!format.has_value()) return format.error();
  if (auto error = check.Operand("scale_inv", scale_inv, ffi::DataType::F32,
                                 per_group, "Bt + (G,)")) {
    return *error;
  }
  if (auto error = check.Operand("amax", amax, ffi::DataType::F32, per_group,
                                 "Bt + (G,)")) {
    return *error;
  }
  GroupedFp8QuantizeProblem problem;
  problem.view = v;
  problem.format = *format;
  problem.rowwise = attrs.rowwise;
  problem.colwise = attrs.colwise;
  return problem;
}

ffi::ErrorOr<GroupedMxfp8QuantizeProblem> CheckGroupedMxfp8QuantizeOperands(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& group_sizes,
    const ffi::AnyBuffer& row, const ffi::AnyBuffer& row_scale,
    const ffi::AnyBuffer& col, const ffi::AnyBuffer& col_scale,
    const GroupedQuantizeAttrs& attrs) {
  const Checker check("eqx_quant_grouped_mxfp8_quantize");
  if (auto error = CheckSomePart(check, attrs)) return *error;
  ffi::ErrorOr<ViewAndBatch> vb =
      CheckView(check, x, group_sizes, attrs.n_batch, attrs.rows_per_unit);
  if (!vb.has_value()) return vb.error();
  const GroupedView& v = vb->view;
  const std::vector<int64_t> rn = {v.rows, v.cols};
  const std::vector<int64_t> data = Concat({vb->batch, rn});
  if (auto error = check.Part("row", row, attrs.rowwise, data, "Bt + (R, N)",
                              "rowwise=" + BoolString(attrs.rowwise))) {
    return *error;
  }
  if (auto error = check.Part("col", col, attrs.colwise, data, "Bt + (R, N)",
                              "colwise=" + BoolString(attrs.colwise))) {
    return *error;
  }
  ffi::ErrorOr<Fp8Format> format = CheckFp8Type(check, row, col, attrs);
  if (!format.has_value()) return format.error();
  ffi::ErrorOr<std::pair<int64_t, int64_t>> bytes = CheckScaleBuffers(
      check, *vb, row_scale, col_scale, attrs, grouped::kMxfp8Block, "E8M0");
  if (!bytes.has_value()) return bytes.error();
  GroupedMxfp8QuantizeProblem problem;
  problem.view = v;
  problem.format = *format;
  problem.rowwise = attrs.rowwise;
  problem.colwise = attrs.colwise;
  problem.row_scale_bytes = bytes->first;
  problem.col_scale_bytes = bytes->second;
  return problem;
}

ffi::ErrorOr<GroupedNvfp4QuantizeProblem> CheckGroupedNvfp4QuantizeOperands(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& amax,
    const ffi::AnyBuffer& keys, const ffi::AnyBuffer& group_sizes,
    const ffi::AnyBuffer& row, const ffi::AnyBuffer& row_scale,
    const ffi::AnyBuffer& col, const ffi::AnyBuffer& col_scale,
    const GroupedNvfp4QuantizeAttrs& attrs) {
  const Checker check("eqx_quant_grouped_nvfp4_quantize");
  if (auto error = CheckSomePart(check, attrs)) return *error;
  ffi::ErrorOr<ViewAndBatch> vb =
      CheckView(check, x, group_sizes, attrs.n_batch, attrs.rows_per_unit);
  if (!vb.has_value()) return vb.error();
  const GroupedView& v = vb->view;
  const std::vector<int64_t> g = {v.groups};
  const std::vector<int64_t> g2 = {v.groups, 2};
  if (auto error = check.Operand("amax", amax, ffi::DataType::F32,
                                 Concat({vb->batch, g}), "Bt + (G,)")) {
    return *error;
  }
  // Without stochastic rounding the keys are not read, and may be empty.
  const std::vector<int64_t> g0 = {v.groups, 0};
  if (auto error = check.Operand(
          "keys", keys, ffi::DataType::U32,
          Concat({vb->batch,
                  EmptyWithoutSr(keys, attrs.stochastic_rounding) ? g0 : g2}),
          attrs.stochastic_rounding
              ? "Bt + (G, 2)"
              : "Bt + (G, 2), or Bt + (G, 0) without stochastic rounding")) {
    return *error;
  }
  const std::vector<int64_t> rn = {v.rows, v.cols};
  const std::vector<int64_t> flat = {v.rows * v.cols};
  if (attrs.rowwise) {
    if (auto error = check.Type("row", row.element_type(),
                                ffi::DataType::F4E2M1FN,
                                "f4e2m1fn (packed E2M1 codes)")) {
      return *error;
    }
  }
  if (auto error = check.Part("row", row, attrs.rowwise,
                              Concat({vb->batch, rn}), "Bt + (R, N)",
                              "rowwise=" + BoolString(attrs.rowwise))) {
    return *error;
  }
  if (attrs.colwise) {
    if (auto error = check.Type("col", col.element_type(),
                                ffi::DataType::F4E2M1FN,
                                "f4e2m1fn (packed E2M1 codes)")) {
      return *error;
    }
  }
  if (auto error = check.Part("col", col, attrs.colwise,
                              Concat({vb->batch, flat}), "Bt + (R*N,)",
                              "colwise=" + BoolString(attrs.colwise))) {
    return *error;
  }
  ffi::ErrorOr<std::pair<int64_t, int64_t>> bytes = CheckScaleBuffers(
      check, *vb, row_scale, col_scale, attrs, grouped::kNvfp4Block, "E4M3");
  if (!bytes.has_value()) return bytes.error();
  GroupedNvfp4QuantizeProblem problem;
  problem.view = v;
  problem.rowwise = attrs.rowwise;
  problem.colwise = attrs.colwise;
  problem.use_2d = attrs.use_2d;
  problem.stochastic_rounding = attrs.stochastic_rounding;
  problem.row_scale_bytes = bytes->first;
  problem.col_scale_bytes = bytes->second;
  return problem;
}

ffi::ErrorOr<GroupedFp8BlockQuantizeProblem>
CheckGroupedFp8BlockQuantizeOperands(const ffi::AnyBuffer& x,
                                     const ffi::AnyBuffer& group_sizes,
                                     const ffi::AnyBuffer& row,
                                     const ffi::AnyBuffer& row_scale,
                                     const ffi::AnyBuffer& col,
                                     const ffi::AnyBuffer& col_scale,
                                     const GroupedFp8BlockQuantizeAttrs& attrs) {
  const Checker check("eqx_quant_grouped_fp8_block_quantize");
  if (auto error = CheckSomePart(check, attrs)) return *error;
  if (auto error = CheckAmaxEpsilon(check, attrs.amax_epsilon)) return *error;
  ffi::ErrorOr<ViewAndBatch> vb =
      CheckView(check, x, group_sizes, attrs.n_batch, attrs.rows_per_unit);
  if (!vb.has_value()) return vb.error();
  const GroupedView& v = vb->view;
  const std::vector<int64_t> rn = {v.rows, v.cols};
  const std::vector<int64_t> flat = {v.rows * v.cols};
  if (auto error = check.Part("row", row, attrs.rowwise,
                              Concat({vb->batch, rn}), "Bt + (R, N)",
                              "rowwise=" + BoolString(attrs.rowwise))) {
    return *error;
  }
  if (auto error = check.Part("col", col, attrs.colwise,
                              Concat({vb->batch, flat}), "Bt + (R*N,)",
                              "colwise=" + BoolString(attrs.colwise))) {
    return *error;
  }
  ffi::ErrorOr<Fp8Format> format = CheckFp8Type(check, row, col, attrs);
  if (!format.has_value()) return format.error();
  const int64_t units =
      grouped::WorstCaseUnits(v.rows, v.groups, kFp8Block);
  const int64_t nb = Fp8Blocks(v.cols);
  const std::vector<int64_t> row_s = {attrs.use_2d ? units : v.rows, nb};
  const std::vector<int64_t> col_s = {attrs.use_2d ? nb : v.cols, units};
  const std::string sizes = "W = W(R, G, 128) = " + std::to_string(units) +
                            ", nb = ceil(N/128) = " + std::to_string(nb);
  for (const auto& [name, buffer, enabled, shape, what] :
       {std::make_tuple("row_scale", &row_scale, attrs.rowwise, row_s,
                        attrs.use_2d ? "Bt + (W, nb)" : "Bt + (R, nb)"),
        std::make_tuple("col_scale", &col_scale, attrs.colwise, col_s,
                        attrs.use_2d ? "Bt + (nb, W)" : "Bt + (N, W)")}) {
    if (enabled) {
      if (auto error = check.Type(name, buffer->element_type(),
                                  ffi::DataType::F32, "f32")) {
        return *error;
      }
    }
    if (auto error = check.Part(
            name, *buffer, enabled, Concat({vb->batch, shape}),
            std::string(what) + ", " + sizes,
            std::string(name[0] == 'r' ? "rowwise=" : "colwise=") +
                BoolString(enabled))) {
      return *error;
    }
  }
  GroupedFp8BlockQuantizeProblem problem;
  problem.view = v;
  Fp8BlockQuantizeProblem& block = problem.block;
  block.input_type = v.input_type;
  block.format = *format;
  block.rowwise = attrs.rowwise;
  block.colwise = attrs.colwise;
  block.use_2d = attrs.use_2d;
  block.power_2_scales = attrs.power_2_scales;
  block.amax_epsilon = attrs.amax_epsilon;
  block.input_max = Fp8BlockInputMax(v.input_type);
  problem.units = units;
  return problem;
}

ffi::ErrorOr<GroupedDbiasProblem> CheckGroupedDbiasOperands(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& group_sizes,
    const ffi::AnyBuffer& dbias, const GroupedDbiasAttrs& attrs) {
  const Checker check("eqx_quant_grouped_dbias");
  ffi::ErrorOr<ViewAndBatch> vb =
      CheckView(check, x, group_sizes, attrs.n_batch, attrs.rows_per_unit);
  if (!vb.has_value()) return vb.error();
  const GroupedView& v = vb->view;
  const std::vector<int64_t> gn = {v.groups, v.cols};
  if (auto error = check.Operand("dbias", dbias, x.element_type(),
                                 Concat({vb->batch, gn}), "Bt + (G, N)")) {
    return *error;
  }
  GroupedDbiasProblem problem;
  problem.view = v;
  return problem;
}

}  // namespace

PreparedCallOr<GroupedFp8QuantizeProblem, GroupedFp8QuantizeBuffers>
PrepareGroupedFp8Quantize(const ffi::AnyBuffer& x, const ffi::AnyBuffer& scale,
                          const ffi::AnyBuffer& group_sizes,
                          const ffi::AnyBuffer& row, const ffi::AnyBuffer& col,
                          const ffi::AnyBuffer& scale_inv,
                          const ffi::AnyBuffer& amax,
                          const GroupedQuantizeAttrs& attrs) {
  ffi::ErrorOr<GroupedFp8QuantizeProblem> problem =
      CheckGroupedFp8QuantizeOperands(x, scale, group_sizes, row, col,
                                      scale_inv, amax, attrs);
  if (!problem.has_value()) return problem.error();
  GroupedFp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.scale = Data<const float>(scale);
  buffers.group_sizes = Data<const int32_t>(group_sizes);
  buffers.row = DataIf<uint8_t>(problem->rowwise, row);
  buffers.col = DataIf<uint8_t>(problem->colwise, col);
  buffers.scale_inv = Data<float>(scale_inv);
  buffers.amax = Data<float>(amax);
  return PreparedCall<GroupedFp8QuantizeProblem, GroupedFp8QuantizeBuffers>{
      *problem, buffers};
}

PreparedCallOr<GroupedMxfp8QuantizeProblem, GroupedMxfp8QuantizeBuffers>
PrepareGroupedMxfp8Quantize(const ffi::AnyBuffer& x,
                            const ffi::AnyBuffer& group_sizes,
                            const ffi::AnyBuffer& row,
                            const ffi::AnyBuffer& row_scale,
                            const ffi::AnyBuffer& col,
                            const ffi::AnyBuffer& col_scale,
                            const GroupedQuantizeAttrs& attrs) {
  ffi::ErrorOr<GroupedMxfp8QuantizeProblem> problem =
      CheckGroupedMxfp8QuantizeOperands(x, group_sizes, row, row_scale, col,
                                        col_scale, attrs);
  if (!problem.has_value()) return problem.error();
  GroupedMxfp8QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.group_sizes = Data<const int32_t>(group_sizes);
  buffers.row = DataIf<uint8_t>(problem->rowwise, row);
  buffers.row_scale = DataIf<uint8_t>(problem->rowwise, row_scale);
  buffers.col = DataIf<uint8_t>(problem->colwise, col);
  buffers.col_scale = DataIf<uint8_t>(problem->colwise, col_scale);
  return PreparedCall<GroupedMxfp8QuantizeProblem,
                      GroupedMxfp8QuantizeBuffers>{*problem, buffers};
}

PreparedCallOr<GroupedNvfp4QuantizeProblem, GroupedNvfp4QuantizeBuffers>
PrepareGroupedNvfp4Quantize(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& amax,
    const ffi::AnyBuffer& keys, const ffi::AnyBuffer& group_sizes,
    const ffi::AnyBuffer& row, const ffi::AnyBuffer& row_scale,
    const ffi::AnyBuffer& col, const ffi::AnyBuffer& col_scale,
    const GroupedNvfp4QuantizeAttrs& attrs) {
  ffi::ErrorOr<GroupedNvfp4QuantizeProblem> problem =
      CheckGroupedNvfp4QuantizeOperands(x, amax, keys, group_sizes, row,
                                        row_scale, col, col_scale, attrs);
  if (!problem.has_value()) return problem.error();
  GroupedNvfp4QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.amax = Data<const float>(amax);
  buffers.keys = Data<const uint32_t>(keys);
  buffers.group_sizes = Data<const int32_t>(group_sizes);
  buffers.row = DataIf<uint8_t>(problem->rowwise, row);
  buffers.row_scale = DataIf<uint8_t>(problem->rowwise, row_scale);
  buffers.col = DataIf<uint8_t>(problem->colwise, col);
  buffers.col_scale = DataIf<uint8_t>(problem->colwise, col_scale);
  return PreparedCall<GroupedNvfp4QuantizeProblem,
                      GroupedNvfp4QuantizeBuffers>{*problem, buffers};
}

PreparedCallOr<GroupedFp8BlockQuantizeProblem, GroupedFp8BlockQuantizeBuffers>
PrepareGroupedFp8BlockQuantize(const ffi::AnyBuffer& x,
                               const ffi::AnyBuffer& group_sizes,
                               const ffi::AnyBuffer& row,
                               const ffi::AnyBuffer& row_scale,
                               const ffi::AnyBuffer& col,
                               const ffi::AnyBuffer& col_scale,
                               const GroupedFp8BlockQuantizeAttrs& attrs) {
  ffi::ErrorOr<GroupedFp8BlockQuantizeProblem> problem =
      CheckGroupedFp8BlockQuantizeOperands(x, group_sizes, row, row_scale, col,
                                           col_scale, attrs);
  if (!problem.has_value()) return problem.error();
  GroupedFp8BlockQuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.group_sizes = Data<const int32_t>(group_sizes);
  buffers.row = DataIf<uint8_t>(problem->block.rowwise, row);
  buffers.row_scale = DataIf<float>(problem->block.rowwise, row_scale);
  buffers.col = DataIf<uint8_t>(problem->block.colwise, col);
  buffers.col_scale = DataIf<float>(problem->block.colwise, col_scale);
  return PreparedCall<GroupedFp8BlockQuantizeProblem,
                      GroupedFp8BlockQuantizeBuffers>{*problem, buffers};
}

PreparedCallOr<GroupedDbiasProblem, GroupedDbiasBuffers> PrepareGroupedDbias(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& group_sizes,
    const ffi::AnyBuffer& dbias, const GroupedDbiasAttrs& attrs) {
  ffi::ErrorOr<GroupedDbiasProblem> problem =
      CheckGroupedDbiasOperands(x, group_sizes, dbias, attrs);
  if (!problem.has_value()) return problem.error();
  GroupedDbiasBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.group_sizes = Data<const int32_t>(group_sizes);
  buffers.dbias = dbias.untyped_data();
  buffers.dbias_type = problem->view.input_type;
  return PreparedCall<GroupedDbiasProblem, GroupedDbiasBuffers>{*problem,
                                                               buffers};
}

}  // namespace eqx_quant
