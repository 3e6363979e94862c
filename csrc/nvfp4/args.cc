#include "nvfp4/args.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/nvfp4_problem.h"
#include "ffi/handler_preamble.h"
#include "ffi/operand_text.h"
#include "ffi/operand_types.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

using Dims = ffi::Span<const int64_t>;

constexpr int64_t kBlock = 16;

using Checker = OperandErrors;

// The input type, the batch and the (A, K, C, L) view of x. `k_needed` (null
// if not) says which setting needs a blocked axis K, for the message.
ffi::ErrorOr<Nvfp4View> CheckView(const Checker& check, const ffi::AnyBuffer& x,
                                  int64_t n_batch, int64_t block_axis,
                                  const std::string* k_needed) {
  Nvfp4View view;
  const std::optional<InputType> input_type = InputTypeOf(x.element_type());
  if (!input_type.has_value()) {
    return check.Fail("x has element type " + DataTypeName(x.element_type()) +
                      " but expected f32, f16 or bf16");
  }
  view.input_type = *input_type;
  const Dims dims = x.dimensions();
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (n_batch < 0 || n_batch >= rank) {
    return check.Fail("n_batch=" + std::to_string(n_batch) +
                      " is out of range [0, " + std::to_string(rank - 1) +
                      "] for x of shape " + ShapeString(dims) +
                      " (each example needs at least one dim)");
  }
  const std::string block_range = "[n_batch, rank(x) - 2] = [" +
                                  std::to_string(n_batch) + ", " +
                                  std::to_string(rank - 2) + "]";
  if (block_axis != -1 && (block_axis < n_batch || block_axis > rank - 2)) {
    return check.Fail("block_axis=" + std::to_string(block_axis) +
                      " is out of range: expected -1 or " + block_range +
                      " for x of shape " + ShapeString(dims));
  }
  if (block_axis == -1 && k_needed != nullptr) {
    return check.Fail("block_axis=-1 but " + *k_needed +
                      " needs a blocked axis: expected block_axis in " +
                      block_range + " for x of shape " + ShapeString(dims));
  }
  const Dims example(dims.begin() + n_batch, rank - n_batch);
  const int64_t n = static_cast<int64_t>(example.size());
  view.batch = Product(dims.first(n_batch));
  view.shape.assign(example.begin(), example.end());
  view.l = example[n - 1];
  if (block_axis == -1) {
    view.k_axis = -1;
    view.a = Product(example.first(n - 1));
    view.k = 1;
    view.c = 1;
  } else {
    const int64_t k_axis = block_axis - n_batch;
    view.k_axis = k_axis;
    view.a = Product(example.first(k_axis));
    view.k = example[k_axis];
    view.c = Product(Dims(example.begin() + k_axis + 1, n - 1 - k_axis - 1));
  }
  return view;
}

std::optional<ffi::Error> CheckSignMask(const Checker& check, int64_t mask) {
  if (mask < 0 || mask > 0xFFFF) {
    return check.Fail("rht_sign_mask=" + std::to_string(mask) +
                      " is not a 16-bit mask: expected [0, 65535]");
  }
  return std::nullopt;
}

ffi::ErrorOr<Nvfp4AmaxProblem> CheckNvfp4AmaxOperands(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& amax,
    const ffi::AnyBuffer& rht_amax, const Nvfp4AmaxAttrs& attrs) {
  const Checker check("eqx_quant_nvfp4_amax");
  const std::string rht_note = "with_rht=" + BoolString(attrs.with_rht);
  ffi::ErrorOr<Nvfp4View> view =
      CheckView(check, x, attrs.n_batch, attrs.block_axis,
                attrs.with_rht ? &rht_note : nullptr);
  if (!view.has_value()) return view.error();
  if (auto error = CheckSignMask(check, attrs.rht_sign_mask)) return *error;
  if (attrs.with_rht && view->k % kBlock != 0) {
    return check.Fail("with_rht=true needs K = x.shape[block_axis] = " +
                      std::to_string(view->k) + " to be a multiple of 16");
  }
  const Dims batch = x.dimensions().first(static_cast<size_t>(attrs.n_batch));
  const std::vector<int64_t> one = {1};
  const std::vector<int64_t> per_example = Concat({batch, one});
  if (auto error = check.Operand("amax", amax, ffi::DataType::F32, per_example,
                                 "B + (1,)")) {
    return *error;
  }
  const std::vector<int64_t> rht_shape =
      attrs.with_rht ? per_example : std::vector<int64_t>{0};
  if (auto error = check.Operand(
          "rht_amax", rht_amax, ffi::DataType::F32, rht_shape,
          (attrs.with_rht ? "B + (1,), " : "(0,), ") + rht_note)) {
    return *error;
  }
  Nvfp4AmaxProblem problem;
  problem.view = std::move(*view);
  problem.with_rht = attrs.with_rht;
  problem.rht_sign_mask = static_cast<uint32_t>(attrs.rht_sign_mask);
  return problem;
}

ffi::ErrorOr<Nvfp4QuantizeProblem> CheckNvfp4QuantizeOperands(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& amax,
    const ffi::AnyBuffer& col_amax, const ffi::AnyBuffer& key,
    const ffi::AnyBuffer& offset, const ffi::AnyBuffer& row,
    const ffi::AnyBuffer& row_scale, const ffi::AnyBuffer& col,
    const ffi::AnyBuffer& col_scale, const Nvfp4QuantizeAttrs& attrs) {
  const Checker check("eqx_quant_nvfp4_quantize");
  if (!attrs.rowwise && !attrs.colwise) {
    return check.Fail(
        "rowwise and colwise are both false; at least one is required");
  }
  const std::string k_needed =
      attrs.colwise ? "colwise=true" : "use_2d=true";
  ffi::ErrorOr<Nvfp4View> view =
      CheckView(check, x, attrs.n_batch, attrs.block_axis,
                (attrs.colwise || attrs.use_2d) ? &k_needed : nullptr);
  if (!view.has_value()) return view.error();
  if (auto error = CheckSignMask(check, attrs.rht_sign_mask)) return *error;
  if (attrs.use_rht && attrs.use_2d) {
    return check.Fail(
        "use_rht=true with use_2d=true: the RHT applies to 1D scaling only");
  }
  if (attrs.use_rht && attrs.colwise && view->k % kBlock != 0) {
    return check.Fail("use_rht=true needs K = x.shape[block_axis] = " +
                      std::to_string(view->k) + " to be a multiple of 16");
  }
  const int64_t n = static_cast<int64_t>(view->shape.size());
  if (static_cast<int64_t>(attrs.global_shape.size()) != n) {
    return check.Fail("global_shape has " +
                      std::to_string(attrs.global_shape.size()) +
                      " entries " + ShapeString(attrs.global_shape) +
                      " but expected " + std::to_string(n) +
                      " (the rank of the per-example shape S)");
  }
  for (int64_t dim : attrs.global_shape) {
    if (dim < 0) {
      return check.Fail("global_shape " + ShapeString(attrs.global_shape) +
                        " has a negative entry");
    }
  }

  // Shape pieces: B, S[:fa-1], S[fa-1], S[fa:], S[:n-1].
  const Dims dims = x.dimensions();
  const size_t nb = static_cast<size_t>(attrs.n_batch);
  const Dims batch = dims.first(nb);
  const Dims s(dims.begin() + nb, static_cast<size_t>(n));
  const std::vector<int64_t> one = {1};
  const std::vector<int64_t> two = {2};
  const std::vector<int64_t> rank = {n};
  const std::vector<int64_t> empty = {0};
  const std::vector<int64_t> per_example = Concat({batch, one});

  if (auto error = check.Operand("amax", amax, ffi::DataType::F32, per_example,
                                 "B + (1,)")) {
    return *error;
  }
  if (auto error = check.Operand("col_amax", col_amax, ffi::DataType::F32,
                                 per_example, "B + (1,)")) {
    return *error;
  }
  // Without stochastic rounding the key words and the index offset are not
  // read, and may be empty.
  const bool sr = attrs.stochastic_rounding;
  if (auto error = check.Operand(
          "key", key, ffi::DataType::U32,
          Concat({batch, EmptyWithoutSr(key, sr) ? empty : two}),
          sr ? "B + (2,)" : "B + (2,), or B + (0,) without stochastic rounding")) {
    return *error;
  }
  if (auto error = check.Operand(
          "offset", offset, ffi::DataType::S32,
          EmptyWithoutSr(offset, sr) ? empty : rank,
          sr ? "(n,), n = rank of the per-example shape"
             : "(n,), n = rank of the per-example shape, or (0,) without "
               "stochastic rounding")) {
    return *error;
  }

  const std::string rowwise_note = "rowwise=" + BoolString(attrs.rowwise);
  const std::string colwise_note = "colwise=" + BoolString(attrs.colwise);
  const std::vector<int64_t> l_blocks = {(view->l + kBlock - 1) / kBlock};
  const bool rw = attrs.rowwise;
  if (auto error = check.Operand(
          "row", row, ffi::DataType::F4E2M1FN, rw ? Concat({dims}) : empty,
          (rw ? "B + S, " : "(0,), ") + rowwise_note)) {
    return *error;
  }
  if (auto error = check.Operand(
          "row_scale", row_scale, ffi::DataType::F8E4M3FN,
          rw ? Concat({batch, s.first(n - 1), l_blocks}) : empty,
          (rw ? "B + S[:n-1] + (ceil(L/16),), " : "(0,), ") + rowwise_note)) {
    return *error;
  }
  std::vector<int64_t> col_shape = empty;
  std::vector<int64_t> col_scale_shape = empty;
  if (attrs.colwise) {
    const size_t fa = static_cast<size_t>(view->k_axis + 1);
    const std::vector<int64_t> k_blocks = {(view->k + kBlock - 1) / kBlock};
    const Dims tail(s.begin() + fa, static_cast<size_t>(n) - fa);
    col_shape = Concat({batch, tail, s.first(fa)});
    col_scale_shape = Concat({batch, tail, s.first(fa - 1), k_blocks});
  }
  const bool cw = attrs.colwise;
  if (auto error = check.Operand(
          "col", col, ffi::DataType::F4E2M1FN, col_shape,
          (cw ? "B + S[fa:] + S[:fa], " : "(0,), ") + colwise_note)) {
    return *error;
  }
  if (auto error = check.Operand(
          "col_scale", col_scale, ffi::DataType::F8E4M3FN, col_scale_shape,
          (cw ? "B + S[fa:] + S[:fa-1] + (ceil(K/16),), " : "(0,), ") +
              colwise_note)) {
    return *error;
  }

  Nvfp4QuantizeProblem problem;
  problem.view = std::move(*view);
  problem.rowwise = attrs.rowwise;
  problem.colwise = attrs.colwise;
  problem.use_2d = attrs.use_2d;
  problem.use_rht = attrs.use_rht && attrs.colwise;
  problem.rht_sign_mask = static_cast<uint32_t>(attrs.rht_sign_mask);
  problem.stochastic_rounding = attrs.stochastic_rounding;
  problem.global_shape.assign(attrs.global_shape.begin(),
                              attrs.global_shape.end());
  return problem;
}

}  // namespace

PreparedCallOr<Nvfp4AmaxProblem, Nvfp4AmaxBuffers> PrepareNvfp4Amax(
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& amax,
    const ffi::AnyBuffer& rht_amax, const Nvfp4AmaxAttrs& attrs) {
  ffi::ErrorOr<Nvfp4AmaxProblem> problem =
      CheckNvfp4AmaxOperands(x, amax, rht_amax, attrs);
  if (!problem.has_value()) return problem.error();
  Nvfp4AmaxBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.amax = Data<float>(amax);
  buffers.rht_amax = DataIf<float>(problem->with_rht, rht_amax);
  return PreparedCall<Nvfp4AmaxProblem, Nvfp4AmaxBuffers>{
      std::move(*problem), buffers};
}

PreparedCallOr<Nvfp4QuantizeProblem, Nvfp4QuantizeBuffers>
PrepareNvfp4Quantize(const ffi::AnyBuffer& x, const ffi::AnyBuffer& amax,
                     const ffi::AnyBuffer& col_amax, const ffi::AnyBuffer& key,
                     const ffi::AnyBuffer& offset, const ffi::AnyBuffer& row,
                     const ffi::AnyBuffer& row_scale,
                     const ffi::AnyBuffer& col,
                     const ffi::AnyBuffer& col_scale,
                     const Nvfp4QuantizeAttrs& attrs) {
  ffi::ErrorOr<Nvfp4QuantizeProblem> problem = CheckNvfp4QuantizeOperands(
      x, amax, col_amax, key, offset, row, row_scale, col, col_scale, attrs);
  if (!problem.has_value()) return problem.error();
  Nvfp4QuantizeBuffers buffers;
  buffers.x = x.untyped_data();
  buffers.amax = Data<const float>(amax);
  buffers.col_amax = Data<const float>(col_amax);
  buffers.key = Data<const uint32_t>(key);
  buffers.offset = Data<const int32_t>(offset);
  buffers.row = DataIf<uint8_t>(problem->rowwise, row);
  buffers.row_scale = DataIf<uint8_t>(problem->rowwise, row_scale);
  buffers.col = DataIf<uint8_t>(problem->colwise, col);
  buffers.col_scale = DataIf<uint8_t>(problem->colwise, col_scale);
  return PreparedCall<Nvfp4QuantizeProblem, Nvfp4QuantizeBuffers>{
      std::move(*problem), buffers};
}

}  // namespace eqx_quant
