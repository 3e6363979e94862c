// Host side of the rowwise-only path of eqx_quant_grouped_mxfp8_quantize:
// TryMxfp8RowOctet (declared in grouped/device_cuda.cuh,
// called by GroupedMxfp8Quantize in grouped/quantize_cuda.cu) launches
// RowOctetKernel (grouped/mxfp8_row_cuda.cuh) when the problem suits
// it. The kernel writes every byte of the scale buffer itself: no memset
// before it. Compiled with the other kernels' flags (--fmad=false
// --ftz=false).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/fp8_format.h"
#include "common/grouped_layout.h"
#include "common/grouped_problem.h"
#include "grouped/device_cuda.cuh"
#include "grouped/mxfp8_row_cuda.cuh"
#include "mxfp8/device_cuda.cuh"

namespace eqx_quant::cuda {

using grouped_dev::Aligned;
using grouped_dev::CheckLaunch;
using grouped_dev::kThreads;
using mxfp8::Bf16In;
using mxfp8::F16In;
using mxfp8::F32In;

namespace {

template <typename In>
GroupedLaunchStatus LaunchRowOctet(const grouped_row::RowParams& p, bool e4m3,
                                   dim3 grid, cudaStream_t stream) {
  using grouped_row::RowOctetKernel;
  if (e4m3) {
    RowOctetKernel<In, Fp8Format::kE4M3Fn><<<grid, kThreads, 0, stream>>>(p);
  } else {
    RowOctetKernel<In, Fp8Format::kE5M2><<<grid, kThreads, 0, stream>>>(p);
  }
  return CheckLaunch("launching the grouped MXFP8 RowOctetKernel");
}

}  // namespace

GroupedLaunchStatus TryMxfp8RowOctet(
    const GroupedMxfp8QuantizeProblem& problem,
    const GroupedMxfp8QuantizeBuffers& buffers, cudaStream_t stream,
    bool* taken) {
  const GroupedView& v = problem.view;
  *taken = false;
  const int vec = v.input_type == InputType::kF32 ? 4 : 8;
  if (!problem.rowwise || problem.colwise || v.cols % vec != 0 ||
      v.batch > 65535 || v.rows >= (int64_t{1} << 25) ||
      !Aligned(buffers.x, 16) || !Aligned(buffers.row, vec) ||
      !Aligned(buffers.row_scale, 16)) {
    return GroupedLaunchStatus{};
  }
  grouped_row::RowParams p;
  dim3 grid;
  if (!grouped_row::MakeRowOctetLaunch(
          problem, buffers, int64_t{grouped_row::kLoads} * 32 * vec,
          grouped::kMxfp8Block, &p, &grid)) {
    return GroupedLaunchStatus{};
  }
  *taken = true;
  const bool e4m3 = problem.format == Fp8Format::kE4M3Fn;
  switch (v.input_type) {
    case InputType::kF32:
      return LaunchRowOctet<F32In>(p, e4m3, grid, stream);
    case InputType::kF16:
      return LaunchRowOctet<F16In>(p, e4m3, grid, stream);
    case InputType::kBF16:
      return LaunchRowOctet<Bf16In>(p, e4m3, grid, stream);
  }
  *taken = false;
  return GroupedLaunchStatus{};
}

}  // namespace eqx_quant::cuda
