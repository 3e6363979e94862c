#include "ffi/dbias_args.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/fp8_quantize_problem.h"
#include "ffi/operand_text.h"
#include "ffi/operand_types.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

namespace ffi = xla::ffi;

std::optional<ffi::Error> CheckDbiasOperands(const OperandErrors& errors,
                                             const ffi::AnyBuffer& x,
                                             const ffi::Buffer<ffi::F32>& dbias,
                                             const ffi::AnyBuffer& dbias_cast,
                                             const DbiasAttrs& attrs,
                                             Fp8QuantizeProblem* problem) {
  const ffi::Span<const int64_t> x_dims = x.dimensions();
  const int64_t x_rank = static_cast<int64_t>(x_dims.size());
  if (attrs.n_batch < 0 || attrs.n_batch > x_rank) {
    return errors.Fail("n_batch=" + std::to_string(attrs.n_batch) +
                           " is out of range [0, " + std::to_string(x_rank) +
                           "] for x of shape " + ShapeString(x_dims));
  }
  const int64_t example_rank = x_rank - attrs.n_batch;
  if (attrs.flatten_axis < 0 || attrs.flatten_axis > example_rank) {
    return errors.Fail(
        "flatten_axis=" + std::to_string(attrs.flatten_axis) +
        " is out of range [0, " + std::to_string(example_rank) +
        "] for x of shape " + ShapeString(x_dims) +
        " with n_batch=" + std::to_string(attrs.n_batch));
  }
  if (attrs.dbias_keep < 0 || attrs.dbias_keep > attrs.flatten_axis) {
    return errors.Fail("dbias_keep=" + std::to_string(attrs.dbias_keep) +
                           " is out of range [0, flatten_axis=" +
                           std::to_string(attrs.flatten_axis) + "]");
  }
  if (attrs.dbias_split < 1 || attrs.dbias_split > attrs.max_split ||
      (attrs.dbias_split > 1 && attrs.dbias_keep >= attrs.flatten_axis)) {
    return errors.Fail("dbias_split=" + std::to_string(attrs.dbias_split) +
                        " must be in [1, " + std::to_string(attrs.max_split) +
                        "], and 1 when no axis is reduced");
  }
  // Shape pieces: B, S[:keep], S[keep:fa], S[fa:].
  const size_t n_batch = static_cast<size_t>(attrs.n_batch);
  const size_t fa = n_batch + static_cast<size_t>(attrs.flatten_axis);
  const size_t keep = n_batch + static_cast<size_t>(attrs.dbias_keep);
  const ffi::Span<const int64_t> batch_dims = x_dims.first(n_batch);
  const ffi::Span<const int64_t> row_dims(x_dims.begin() + n_batch,
                                          fa - n_batch);
  const ffi::Span<const int64_t> kept_dims(x_dims.begin() + n_batch,
                                           keep - n_batch);
  const ffi::Span<const int64_t> reduced_dims(x_dims.begin() + keep, fa - keep);
  const ffi::Span<const int64_t> col_dims = x_dims.last(x_dims.size() - fa);
  const std::vector<int64_t> empty_shape = {0};
  // dbias.
  const std::string dbias_note = "with_dbias=" + BoolString(attrs.with_dbias);
  if (attrs.with_dbias) {
    if (attrs.dbias_split > 1 &&
        (reduced_dims[0] % attrs.dbias_split != 0 ||
         (attrs.dbias_split & (attrs.dbias_split - 1)) != 0)) {
      return errors.Fail(
          "dbias_split=" + std::to_string(attrs.dbias_split) +
          " must be a power of two dividing the length " +
          std::to_string(reduced_dims[0]) + " of the split axis S[dbias_keep]");
    }
    const std::vector<int64_t> split = {attrs.dbias_split};
    if (auto error = errors.Shape(
            "dbias", dbias.dimensions(),
            Concat({batch_dims, kept_dims, split, col_dims}),
            "B + S[:dbias_keep] + (dbias_split,) + S[flatten_axis:], "
            "dbias_keep=" +
                std::to_string(attrs.dbias_keep) + ", " + dbias_note)) {
      return *error;
    }
  } else if (auto error = errors.Shape("dbias", dbias.dimensions(), empty_shape,
                                     dbias_note)) {
    return *error;
  }
  const std::string cast_note = "dbias_cast=" + BoolString(attrs.dbias_cast);
  if (attrs.dbias_cast && !attrs.with_dbias) {
    return errors.Fail("dbias_cast=true needs with_dbias=true");
  }
  if (attrs.dbias_cast) {
    if (auto error = errors.Shape(
            "dbias_cast", dbias_cast.dimensions(),
            Concat({batch_dims, kept_dims, col_dims}),
            "B + S[:dbias_keep] + S[flatten_axis:], " + cast_note)) {
      return *error;
    }
    if (dbias_cast.element_type() != x.element_type()) {
      return errors.Fail("dbias_cast has element type " +
                          DataTypeName(dbias_cast.element_type()) +
                          " but expected " + DataTypeName(x.element_type()) +
                          " (the element type of x)");
    }
  } else if (auto error = errors.Shape("dbias_cast", dbias_cast.dimensions(),
                                        empty_shape, cast_note)) {
    return *error;
  }

  problem->batch = Product(batch_dims);
  problem->rows = Product(row_dims);
  problem->cols = Product(col_dims);
  problem->with_dbias = attrs.with_dbias;
  problem->dbias_cast = attrs.dbias_cast;
  problem->dbias_kept_rows = Product(kept_dims);
  problem->dbias_split = attrs.dbias_split;
  problem->dbias_reduced_dims.assign(reduced_dims.begin(), reduced_dims.end());
  return std::nullopt;
}

}  // namespace eqx_quant
