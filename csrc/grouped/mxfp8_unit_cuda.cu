// Host side of the colwise path of eqx_quant_grouped_mxfp8_quantize:
// TryMxfp8UnitTile (declared in grouped/device_cuda.cuh,
// called by GroupedMxfp8Quantize in grouped/quantize_cuda.cu) launches
// UnitTileKernel (grouped/mxfp8_unit_cuda.cuh) for colwise or rowwise
// + colwise outputs when the problem suits it. The kernel writes every byte
// of both scale buffers itself: no memset before it. Compiled with the other
// kernels' flags (--fmad=false --ftz=false).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/fp8_format.h"
#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "grouped/device_cuda.cuh"
#include "grouped/mxfp8_unit_cuda.cuh"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda {

using grouped_dev::Aligned;
using grouped_dev::CheckLaunch;
using grouped_dev::kThreads;
using grouped_dev::RowSpec;
using grouped_dev::WholeTileUnits;
using mxfp8::Bf16In;
using mxfp8::F16In;
using mxfp8::F32In;

namespace {

template <typename In, Fp8Format kFormat>
GroupedLaunchStatus LaunchUnitLayout(const grouped_unit::UnitParams& p,
                                     bool rowwise, dim3 grid,
                                     cudaStream_t stream) {
  using grouped_unit::UnitTileKernel;
  if (rowwise) {
    UnitTileKernel<In, kFormat, true><<<grid, kThreads, 0, stream>>>(p);
  } else {
    UnitTileKernel<In, kFormat, false><<<grid, kThreads, 0, stream>>>(p);
  }
  return CheckLaunch("launching the grouped MXFP8 UnitTileKernel");
}

template <typename In>
GroupedLaunchStatus LaunchUnit(const grouped_unit::UnitParams& p, bool e4m3,
                               bool rowwise, dim3 grid, cudaStream_t stream) {
  return e4m3 ? LaunchUnitLayout<In, Fp8Format::kE4M3Fn>(p, rowwise, grid,
                                                         stream)
              : LaunchUnitLayout<In, Fp8Format::kE5M2>(p, rowwise, grid,
                                                       stream);
}

}  // namespace

GroupedLaunchStatus TryMxfp8UnitTile(
    const GroupedMxfp8QuantizeProblem& problem,
    const GroupedMxfp8QuantizeBuffers& buffers, cudaStream_t stream,
    bool* taken) {
  const GroupedView& v = problem.view;
  *taken = false;
  const bool rowwise = problem.rowwise;
  const int vec = v.input_type == InputType::kF32 ? 4 : 8;
  if (!problem.colwise || v.cols % vec != 0 || v.batch > 65535 ||
      v.rows >= (int64_t{1} << 25) || !Aligned(buffers.x, 16) ||
      !Aligned(buffers.col, 8) || !Aligned(buffers.col_scale, 16) ||
      (rowwise && (!Aligned(buffers.row, 8) || !Aligned(buffers.row_scale, 16)))) {
    return GroupedLaunchStatus{};
  }
  const int64_t col_ctas = grouped::CeilDiv(v.cols, int64_t{32} * vec);
  const WholeTileUnits units = WholeTileUnits::Of(v);
  const int64_t scale_bytes = units.ScaleBytes();
  if (units.grid * col_ctas > int64_t{0x7FFFFFFF} ||
      problem.col_scale_bytes != scale_bytes ||
      (rowwise && problem.row_scale_bytes != scale_bytes)) {
    return GroupedLaunchStatus{};
  }
  *taken = true;
  grouped_unit::UnitParams p{};
  p.x = buffers.x;
  p.group_sizes = buffers.group_sizes;
  p.row = rowwise ? buffers.row : nullptr;
  p.row_scale = rowwise ? buffers.row_scale : nullptr;
  p.col = buffers.col;
  p.col_scale = buffers.col_scale;
  p.rs = RowSpec::Make(v.rows, v.rows_per_unit);
  p.cols = v.cols;
  p.groups = v.groups;
  p.scale_bytes = scale_bytes;
  p.col_ctas = static_cast<uint32_t>(col_ctas);
  p.tiles_per_row = static_cast<uint32_t>(units.tiles_per_row);
  p.worst_units = static_cast<uint32_t>(units.worst);
  p.wide = v.cols % 16 == 0 && Aligned(buffers.col, 16) &&
           (!rowwise || Aligned(buffers.row, 16));
  const dim3 grid(static_cast<unsigned>(units.grid * col_ctas),
                  static_cast<unsigned>(v.batch));
  const bool e4m3 = problem.format == Fp8Format::kE4M3Fn;
  switch (v.input_type) {
    case InputType::kF32:
      return LaunchUnit<F32In>(p, e4m3, rowwise, grid, stream);
    case InputType::kF16:
      return LaunchUnit<F16In>(p, e4m3, rowwise, grid, stream);
    case InputType::kBF16:
      return LaunchUnit<Bf16In>(p, e4m3, rowwise, grid, stream);
  }
  *taken = false;
  return GroupedLaunchStatus{};
}

}  // namespace eqx_quant::cuda
