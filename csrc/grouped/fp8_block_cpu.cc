// The CPU kernel of eqx_quant_grouped_fp8_block_quantize
// (common/grouped_problem.h): every group is handed to the dense FP8 block
// kernel (fp8_block/quantize_cpu.h) as the sub-view of its rows, so each
// group's bytes and scales are the dense op's on those rows. The dense
// kernel's colwise scale matrix of a group is (N or nb) x k_g; the grouped
// layout stacks the groups' matrices side by side (W columns), so those go
// through a per-call buffer and are copied into their columns.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/fp8_block_problem.h"
#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "common/parallel_for.h"
#include "fp8_block/quantize_cpu.h"
#include "grouped/quantize_cpu.h"

namespace eqx_quant::cpu {
namespace {

// One example: zero or fill what no group writes, then each group through
// the dense kernel.
void QuantizeExample(const GroupedFp8BlockQuantizeProblem& p,
                     const GroupedFp8BlockQuantizeBuffers& buf, int64_t b,
                     std::vector<int64_t>& starts,
                     std::vector<float>& col_scale_buffer,
                     const ParallelFor& parallel) {
  const GroupedView& v = p.view;
  const Fp8BlockQuantizeProblem& s = p.block;
  const int64_t nb = Fp8Blocks(v.cols);
  const int64_t w = p.units;
  const int64_t elements = v.rows * v.cols;
  const auto* x = static_cast<const uint8_t*>(buf.x) +
                  b * elements * InputTypeBytes(v.input_type);
  uint8_t* row = s.rowwise ? buf.row + b * elements : nullptr;
  uint8_t* col = s.colwise ? buf.col + b * elements : nullptr;
  const int64_t row_scale_rows = s.use_2d ? w : v.rows;
  const int64_t col_scale_rows = s.use_2d ? nb : v.cols;
  float* row_scale =
      s.rowwise ? buf.row_scale + b * row_scale_rows * nb : nullptr;
  float* col_scale =
      s.colwise ? buf.col_scale + b * col_scale_rows * w : nullptr;

  grouped::GroupStarts(buf.group_sizes + b * v.groups, v.groups,
                       v.rows_per_unit, v.rows, starts.data());
  const int64_t end = starts[v.groups];
  const int64_t tail = (v.rows - end) * v.cols;
  if (row != nullptr) {
    std::memset(row + end * v.cols, 0, static_cast<size_t>(tail));
    if (s.use_2d) {
      std::fill(row_scale, row_scale + w * nb, 0.0f);
    } else {
      std::fill(row_scale + end * nb, row_scale + v.rows * nb,
                Fp8BlockZeroScaleInv(s));
    }
  }
  if (col != nullptr) {
    std::memset(col + end * v.cols, 0, static_cast<size_t>(tail));
    std::fill(col_scale, col_scale + col_scale_rows * w, 0.0f);
  }

  Fp8BlockQuantizeProblem dense = s;
  dense.batch = 1;
  dense.cols = v.cols;
  if (!s.colwise && !s.use_2d) {
    // 1x128 rowwise blocks lie in one row: the groups' rows are one dense view.
    dense.rows = end;
    Fp8BlockQuantizeBuffers all;
    all.x = x;
    all.row = row;
    all.row_scale = row_scale;
    Fp8BlockQuantize(dense, all, parallel);
    return;
  }
  int64_t first_unit = 0;  // u_g
  for (int64_t g = 0; g < v.groups; ++g) {
    const int64_t rows = starts[g + 1] - starts[g];
    if (rows == 0) continue;
    const int64_t first = starts[g] * v.cols;
    const int64_t units = Fp8Blocks(rows);  // k_g
    dense.rows = rows;
    Fp8BlockQuantizeBuffers sub;
    sub.x = x + first * InputTypeBytes(v.input_type);
    if (row != nullptr) {
      sub.row = row + first;
      sub.row_scale =
          row_scale + (s.use_2d ? first_unit : starts[g]) * nb;
    }
    if (col != nullptr) {
      col_scale_buffer.resize(static_cast<size_t>(col_scale_rows * units));
      sub.col = col + first;
      sub.col_scale = col_scale_buffer.data();
    }
    Fp8BlockQuantize(dense, sub, parallel);
    if (col != nullptr) {
      for (int64_t i = 0; i < col_scale_rows; ++i) {
        std::copy_n(col_scale_buffer.data() + i * units, units,
                    col_scale + i * w + first_unit);
      }
    }
    first_unit += units;
  }
}

}  // namespace

void GroupedFp8BlockQuantize(const GroupedFp8BlockQuantizeProblem& problem,
                             const GroupedFp8BlockQuantizeBuffers& buffers,
                             const ParallelFor& parallel) {
  const GroupedView& v = problem.view;
  std::vector<int64_t> starts(static_cast<size_t>(v.groups + 1));
  std::vector<float> col_scale_buffer;
  for (int64_t b = 0; b < v.batch; ++b) {
    QuantizeExample(problem, buffers, b, starts, col_scale_buffer, parallel);
  }
}

}  // namespace eqx_quant::cpu
