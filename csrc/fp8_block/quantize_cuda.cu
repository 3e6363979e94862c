// One CTA per 128x128 tile: the tile is loaded once into shared memory as
// float (coalesced reads of x), each row's and each column's amax is a warp
// reduction of AmaxKeys (and the tile's the max of the rows'), and both
// copies are written from shared memory with consecutive threads on
// consecutive bytes (coalesced: the colwise copy is written along the rows of
// the transposed view, reading shared memory down a column, conflict-free
// with a pitch of 129 floats).

#include <cuda_runtime.h>

#include <cstdint>

#include "common/fp8_block_problem.h"
#include "common/fp8_format.h"
#include "fp8_block/quantize_cuda.h"

namespace eqx_quant::cuda {
namespace {

constexpr int kB = static_cast<int>(kFp8Block);
constexpr int kPitch = kB + 1;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kSharedBytes = kB * kPitch * static_cast<int>(sizeof(float));

struct F32In {
  using Storage = float;
  __device__ static float ToFloat(float v) { return v; }
};
struct F16In {
  using Storage = uint16_t;
  __device__ static float ToFloat(uint16_t b) { return F16BitsToFloat(b); }
};
struct Bf16In {
  using Storage = uint16_t;
  __device__ static float ToFloat(uint16_t b) { return Bf16BitsToFloat(b); }
};

template <typename Format>
__device__ inline float ScaleOf(uint32_t key, const Fp8BlockQuantizeProblem& p) {
  return Fp8BlockScale(BitsToFloat(key), BitsToFloat(Format::kMaxFiniteF32Bits),
                       p.input_max, p.power_2_scales, p.amax_epsilon);
}

template <typename Input, typename Format>
__global__ void __launch_bounds__(kThreads)
    Fp8BlockTileKernel(Fp8BlockQuantizeProblem p, Fp8BlockQuantizeBuffers buf) {
  extern __shared__ float tile[];  // kB x kPitch
  __shared__ float row_scale[kB];
  __shared__ float col_scale[kB];
  __shared__ uint32_t warp_key[kWarps];

  const int64_t rb_count = Fp8Blocks(p.rows);
  const int64_t cb_count = Fp8Blocks(p.cols);
  const int64_t task = blockIdx.x;
  const int64_t b = task / (rb_count * cb_count);
  const int64_t rb = task % (rb_count * cb_count) / cb_count;
  const int64_t cb = task % cb_count;
  const int64_t r0 = rb * kB;
  const int64_t c0 = cb * kB;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kB), p.rows - r0));
  const int cols = static_cast<int>(min(static_cast<int64_t>(kB), p.cols - c0));
  const int64_t example = b * p.rows * p.cols;
  const auto* x = static_cast<const typename Input::Storage*>(buf.x) + example;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;

  for (int idx = threadIdx.x; idx < kB * kB; idx += kThreads) {
    const int i = idx / kB;
    const int j = idx % kB;
    float value = 0.0f;
    if (i < rows && j < cols) {
      value = Input::ToFloat(x[(r0 + i) * p.cols + c0 + j]);
    }
    tile[i * kPitch + j] = value;
  }
  __syncthreads();

  // Row scales (1x128 rowwise, and the tile's amax for 128x128), then column
  // scales (1x128 colwise): one warp per line.
  uint32_t tile_key = 0;
  for (int i = warp; i < kB; i += kWarps) {
    uint32_t key = 0;
    for (int j = lane; j < kB; j += 32) key = max(key, AmaxKey(tile[i * kPitch + j]));
    key = __reduce_max_sync(0xFFFFFFFFu, key);
    tile_key = max(tile_key, key);
    if (!p.use_2d && p.rowwise && lane == 0) {
      const float scale = ScaleOf<Format>(key, p);
      row_scale[i] = scale;
      if (i < rows) buf.row_scale[(b * p.rows + r0 + i) * cb_count + cb] = 1.0f / scale;
    }
  }
  if (!p.use_2d && p.colwise) {
    for (int j = warp; j < kB; j += kWarps) {
      uint32_t key = 0;
      for (int i = lane; i < kB; i += 32) key = max(key, AmaxKey(tile[i * kPitch + j]));
      key = __reduce_max_sync(0xFFFFFFFFu, key);
      if (lane == 0) {
        const float scale = ScaleOf<Format>(key, p);
        col_scale[j] = scale;
        if (j < cols) buf.col_scale[(b * p.cols + c0 + j) * rb_count + rb] = 1.0f / scale;
      }
    }
  }
  if (p.use_2d) {
    if (lane == 0) warp_key[warp] = tile_key;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t key = 0;
      for (int w = 0; w < kWarps; ++w) key = max(key, warp_key[w]);
      const float scale = ScaleOf<Format>(key, p);
      row_scale[0] = scale;
      if (p.rowwise) buf.row_scale[(b * rb_count + rb) * cb_count + cb] = 1.0f / scale;
      if (p.colwise) buf.col_scale[(b * cb_count + cb) * rb_count + rb] = 1.0f / scale;
    }
  }
  __syncthreads();

  if (p.rowwise) {
    uint8_t* row = buf.row + example;
    for (int idx = threadIdx.x; idx < kB * kB; idx += kThreads) {
      const int i = idx / kB;
      const int j = idx % kB;
      if (i < rows && j < cols) {
        const float scale = p.use_2d ? row_scale[0] : row_scale[i];
        row[(r0 + i) * p.cols + c0 + j] = FloatToFp8<Format>(tile[i * kPitch + j] * scale);
      }
    }
  }
  if (p.colwise) {
    uint8_t* col = buf.col + example;
    for (int idx = threadIdx.x; idx < kB * kB; idx += kThreads) {
      const int j = idx / kB;
      const int i = idx % kB;
      if (i < rows && j < cols) {
        const float scale = p.use_2d ? row_scale[0] : col_scale[j];
        col[(c0 + j) * p.rows + r0 + i] = FloatToFp8<Format>(tile[i * kPitch + j] * scale);
      }
    }
  }
}

template <typename Input, typename Format>
Fp8BlockLaunchStatus Launch(const Fp8BlockQuantizeProblem& p,
                            const Fp8BlockQuantizeBuffers& buf, cudaStream_t stream) {
  auto kernel = Fp8BlockTileKernel<Input, Format>;
  cudaError_t error = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
  if (error != cudaSuccess) return {false, static_cast<int>(error), "shared memory opt-in"};
  const int64_t tiles = p.batch * Fp8Blocks(p.rows) * Fp8Blocks(p.cols);
  if (tiles > 0x7FFFFFFF) return {false, 0, "more than 2^31 - 1 tiles"};
  kernel<<<static_cast<unsigned>(tiles), kThreads, kSharedBytes, stream>>>(p, buf);
  error = cudaGetLastError();
  if (error != cudaSuccess) return {false, static_cast<int>(error), "tile kernel launch"};
  return {};
}

template <typename Input>
Fp8BlockLaunchStatus LaunchInput(const Fp8BlockQuantizeProblem& p,
                                 const Fp8BlockQuantizeBuffers& buf, cudaStream_t stream) {
  if (p.format == Fp8Format::kE4M3Fn) return Launch<Input, E4M3Fn>(p, buf, stream);
  return Launch<Input, E5M2>(p, buf, stream);
}

}  // namespace

Fp8BlockLaunchStatus Fp8BlockQuantize(const Fp8BlockQuantizeProblem& problem,
                                      const Fp8BlockQuantizeBuffers& buffers,
                                      CUstream_st* stream) {
  if (problem.batch == 0 || problem.rows == 0 || problem.cols == 0) return {};
  switch (problem.input_type) {
    case InputType::kF32:
      return LaunchInput<F32In>(problem, buffers, stream);
    case InputType::kF16:
      return LaunchInput<F16In>(problem, buffers, stream);
    case InputType::kBF16:
      return LaunchInput<Bf16In>(problem, buffers, stream);
  }
  return {false, 0, "unknown input type"};
}

}  // namespace eqx_quant::cuda
