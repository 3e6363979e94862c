// XLA FFI handler of eqx_quant_grouped_fp8_block_gemm_cuda
// (gemm/grouped_fp8_block_gemm_cuda.h, docs/gemm.md): the buffers checked,
// then the grouped GEMM enqueued on XLA's stream with its per-call arguments
// in XLA's scratch memory. The host never waits on the device.
//
//   Arg 0  a            F8E4M3FN  (M, K)            K-contiguous
//   Arg 1  a_scale      F32       (M, ceil(K/128))  scale_inv, row-major
//   Arg 2  b            F8E4M3FN  (G, N, K)         K-contiguous
//   Arg 3  b_scale      F32       (G, ceil(N/128), ceil(K/128)) with b_tiles,
//                                 else (G, N, ceil(K/128))
//   Arg 4  group_sizes  S32       (G,)
//   Arg 5  first_row    S32       (1,)
//   Ret 0  out          BF16 | F32  (M, N)
//   Attrs  b_tiles: bool
//
// K must be a multiple of 16 and N of 8 (BF16 out) or 4 (F32 out): TMA's
// 16-byte aligned rows.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "ffi/cuda_launch_error.h"
#include "gemm/grouped_fp8_block_gemm_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

namespace cuda {

GemmStatus GroupedFp8BlockGemm(const GroupedFp8BlockGemmProblem& problem,
                               DeviceScratch scratch, cudaStream_t stream) {
  namespace g = grouped_fp8_block_gemm;
  if (problem.m == 0 || problem.n == 0) return {};
  if (problem.groups == 0 || problem.k == 0) {
    // No group, or no K: every row is 0.
    const size_t bytes =
        static_cast<size_t>(problem.m) * problem.n * (problem.out_bf16 ? 2 : 4);
    const cudaError_t error = cudaMemsetAsync(problem.out, 0, bytes, stream);
    if (error != cudaSuccess) return {false, static_cast<int>(error), "cudaMemsetAsync"};
    return {};
  }
  if (problem.b_tiles) {
    return problem.out_bf16 ? g::RunTilesBf16(problem, scratch, stream)
                            : g::RunTilesF32(problem, scratch, stream);
  }
  return problem.out_bf16 ? g::RunRowsBf16(problem, scratch, stream)
                          : g::RunRowsF32(problem, scratch, stream);
}

}  // namespace cuda

namespace {

namespace ffi = xla::ffi;
constexpr const char* kTarget = "eqx_quant_grouped_fp8_block_gemm_cuda";
constexpr int kMaxOwned = 4;

ffi::Error Invalid(const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(kTarget) + ": " + what);
}

bool HasDims(const ffi::AnyBuffer& buffer, std::initializer_list<int64_t> dims) {
  const auto have = buffer.dimensions();
  if (have.size() != dims.size()) return false;
  size_t i = 0;
  for (const int64_t d : dims) {
    if (have[i++] != d) return false;
  }
  return true;
}

std::string Shape(std::initializer_list<int64_t> dims) {
  std::string text = "(";
  for (const int64_t d : dims) text += (text.size() > 1 ? ", " : "") + std::to_string(d);
  return text + ")";
}

// XLA's scratch memory where it hands it out, else stream-ordered memory
// (cudaMallocAsync: no host sync), freed on the stream after the launches.
struct CallScratch {
  ffi::ScratchAllocator* xla;
  cudaStream_t stream;
  void* owned[kMaxOwned] = {};
  int count = 0;
};

void* AllocateScratch(void* context, size_t bytes) {
  auto* scratch = static_cast<CallScratch*>(context);
  if (std::optional<void*> got = scratch->xla->Allocate(bytes, 256)) return *got;
  if (scratch->count == kMaxOwned) return nullptr;
  void* memory = nullptr;
  if (cudaMallocAsync(&memory, bytes, scratch->stream) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  scratch->owned[scratch->count++] = memory;
  return memory;
}

ffi::Error GroupedFp8BlockGemmCudaImpl(cudaStream_t stream, ffi::ScratchAllocator scratch,
                                       ffi::AnyBuffer a, ffi::AnyBuffer a_scale,
                                       ffi::AnyBuffer b, ffi::AnyBuffer b_scale,
                                       ffi::AnyBuffer group_sizes, ffi::AnyBuffer first_row,
                                       ffi::Result<ffi::AnyBuffer> out, bool b_tiles) {
  if (a.dimensions().size() != 2 || b.dimensions().size() != 3) {
    return Invalid("a must be (M, K) and b (G, N, K)");
  }
  if (a.element_type() != ffi::DataType::F8E4M3FN ||
      b.element_type() != ffi::DataType::F8E4M3FN) {
    return Invalid("a and b must be F8E4M3FN");
  }
  const int64_t m = a.dimensions()[0], k = a.dimensions()[1];
  const int64_t groups = b.dimensions()[0], n = b.dimensions()[1];
  const int64_t kb = (k + 127) / 128;
  if (b.dimensions()[2] != k) return Invalid("b must be (G, N, K) with a's K");
  if (a_scale.element_type() != ffi::DataType::F32 || !HasDims(a_scale, {m, kb})) {
    return Invalid("a_scale must be F32 (M, ceil(K/128)) = " + Shape({m, kb}));
  }
  const int64_t b_rows = b_tiles ? (n + 127) / 128 : n;
  if (b_scale.element_type() != ffi::DataType::F32 || !HasDims(b_scale, {groups, b_rows, kb})) {
    return Invalid("b_scale must be F32 " + Shape({groups, b_rows, kb}));
  }
  if (group_sizes.element_type() != ffi::DataType::S32 || !HasDims(group_sizes, {groups})) {
    return Invalid("group_sizes must be S32 (G,) = " + Shape({groups}));
  }
  if (first_row.element_type() != ffi::DataType::S32 || first_row.element_count() != 1) {
    return Invalid("first_row must be S32 (1,)");
  }
  const bool out_bf16 = out->element_type() == ffi::DataType::BF16;
  if ((!out_bf16 && out->element_type() != ffi::DataType::F32) || !HasDims(*out, {m, n})) {
    return Invalid("out must be BF16 or F32 (M, N) = " + Shape({m, n}));
  }
  if (k % 16 != 0 || n % (out_bf16 ? 8 : 4) != 0) {
    return Invalid("K must be a multiple of 16 and N of 8 (BF16 out) or 4 (F32 out): TMA's "
                   "16-byte rows");
  }
  cuda::GroupedFp8BlockGemmProblem problem;
  problem.m = m;
  problem.n = n;
  problem.k = k;
  problem.groups = groups;
  problem.b_tiles = b_tiles;
  problem.out_bf16 = out_bf16;
  problem.a = a.untyped_data();
  problem.a_scale = static_cast<const float*>(a_scale.untyped_data());
  problem.b = b.untyped_data();
  problem.b_scale = static_cast<const float*>(b_scale.untyped_data());
  problem.group_sizes = static_cast<const int32_t*>(group_sizes.untyped_data());
  problem.first_row = static_cast<const int32_t*>(first_row.untyped_data());
  problem.out = out->untyped_data();
  CallScratch call_scratch{&scratch, stream};
  const cuda::GemmStatus status = cuda::GroupedFp8BlockGemm(
      problem, cuda::DeviceScratch{&AllocateScratch, &call_scratch}, stream);
  for (int i = 0; i < call_scratch.count; ++i) cudaFreeAsync(call_scratch.owned[i], stream);
  return LaunchStatusError(kTarget, status, ffi::ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(GroupedFp8BlockGemmCuda, eqx_quant::GroupedFp8BlockGemmCudaImpl,
                              eqx_quant::BindCudaStream()
                                  .Ctx<xla::ffi::ScratchAllocator>()
                                  .Arg<xla::ffi::AnyBuffer>()  // a
                                  .Arg<xla::ffi::AnyBuffer>()  // a_scale
                                  .Arg<xla::ffi::AnyBuffer>()  // b
                                  .Arg<xla::ffi::AnyBuffer>()  // b_scale
                                  .Arg<xla::ffi::AnyBuffer>()  // group_sizes
                                  .Arg<xla::ffi::AnyBuffer>()  // first_row
                                  .Ret<xla::ffi::AnyBuffer>()  // out
                                  .Attr<bool>("b_tiles"));
