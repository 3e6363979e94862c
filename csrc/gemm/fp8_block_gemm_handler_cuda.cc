// XLA FFI handler of eqx_quant_fp8_block_gemm_cuda (gemm/fp8_block_gemm_cuda.h):
//
//   Arg 0  a        F8E4M3FN  (M, K)               K-contiguous
//   Arg 1  a_scale  F32       (ceil(K/128), M)      M-contiguous scale_inv
//   Arg 2  b        F8E4M3FN  (N, K)               K-contiguous
//   Arg 3  b_scale  F32       (ceil(K/128), ceil(N/128)) with b_tiles, else
//                             (ceil(K/128), N)
//   Ret 0  out      F32 | BF16  (M, N)   (BF16: N a multiple of 8)
//   Attrs  b_tiles: bool
//
// CUTLASS's workspace comes from XLA's scratch memory, else stream-ordered
// memory freed on the stream after the launch: the host never waits.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>

#include "ffi/cuda_launch_error.h"
#include "gemm/fp8_block_gemm_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

namespace cuda {

size_t Fp8BlockGemmWorkspaceBytes(const Fp8BlockGemmProblem& problem) {
  namespace g = fp8_block_gemm;
  if (problem.out_bf16) {
    return problem.b_tiles ? g::WorkspaceTilesBf16(problem) : g::WorkspaceRowsBf16(problem);
  }
  return problem.b_tiles ? g::WorkspaceTiles(problem) : g::WorkspaceRows(problem);
}

GemmStatus Fp8BlockGemm(const Fp8BlockGemmProblem& problem, void* workspace,
                        CUstream_st* stream) {
  namespace g = fp8_block_gemm;
  if (problem.m == 0 || problem.n == 0) return {};
  if (problem.out_bf16) {
    return problem.b_tiles ? g::RunTilesBf16(problem, workspace, stream)
                           : g::RunRowsBf16(problem, workspace, stream);
  }
  return problem.b_tiles ? g::RunTiles(problem, workspace, stream)
                         : g::RunRows(problem, workspace, stream);
}

}  // namespace cuda

namespace {

namespace ffi = xla::ffi;
constexpr const char* kTarget = "eqx_quant_fp8_block_gemm_cuda";

ffi::Error Invalid(const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(kTarget) + ": " + what);
}

bool HasDims(const ffi::AnyBuffer& buffer, int64_t d0, int64_t d1) {
  const auto dims = buffer.dimensions();
  return dims.size() == 2 && dims[0] == d0 && dims[1] == d1;
}

ffi::Error Fp8BlockGemmCudaImpl(cudaStream_t stream, ffi::ScratchAllocator scratch,
                                ffi::AnyBuffer a, ffi::AnyBuffer a_scale, ffi::AnyBuffer b,
                                ffi::AnyBuffer b_scale, ffi::Result<ffi::AnyBuffer> out,
                                bool b_tiles) {
  if (a.dimensions().size() != 2 || b.dimensions().size() != 2) {
    return Invalid("a and b must be 2-D");
  }
  const int64_t m = a.dimensions()[0], k = a.dimensions()[1], n = b.dimensions()[0];
  const int64_t kb = (k + 127) / 128;
  if (a.element_type() != ffi::DataType::F8E4M3FN ||
      b.element_type() != ffi::DataType::F8E4M3FN) {
    return Invalid("a and b must be F8E4M3FN");
  }
  if (b.dimensions()[1] != k) return Invalid("b must be (N, K) with a's K");
  if (a_scale.element_type() != ffi::DataType::F32 || !HasDims(a_scale, kb, m)) {
    return Invalid("a_scale must be F32 (ceil(K/128), M) = (" + std::to_string(kb) + ", " +
                   std::to_string(m) + ")");
  }
  const int64_t b_cols = b_tiles ? (n + 127) / 128 : n;
  if (b_scale.element_type() != ffi::DataType::F32 || !HasDims(b_scale, kb, b_cols)) {
    return Invalid("b_scale must be F32 (" + std::to_string(kb) + ", " +
                   std::to_string(b_cols) + ")");
  }
  const bool out_bf16 = out->element_type() == ffi::DataType::BF16;
  if ((!out_bf16 && out->element_type() != ffi::DataType::F32) || !HasDims(*out, m, n)) {
    return Invalid("out must be F32 or BF16 (M, N)");
  }
  if (k % 16 != 0 || n % (out_bf16 ? 8 : 4) != 0) {
    return Invalid("K must be a multiple of 16 and N of 4 (F32 out) or 8 (BF16 out): TMA's "
                   "16-byte rows");
  }
  cuda::Fp8BlockGemmProblem problem;
  problem.m = m;
  problem.n = n;
  problem.k = k;
  problem.b_tiles = b_tiles;
  problem.a = a.untyped_data();
  problem.a_scale = static_cast<const float*>(a_scale.untyped_data());
  problem.b = b.untyped_data();
  problem.b_scale = static_cast<const float*>(b_scale.untyped_data());
  problem.out = out->untyped_data();
  problem.out_bf16 = out_bf16;
  const size_t bytes = cuda::Fp8BlockGemmWorkspaceBytes(problem);
  void* workspace = nullptr;
  void* owned = nullptr;
  if (bytes > 0) {
    if (std::optional<void*> got = scratch.Allocate(bytes, 256)) {
      workspace = *got;
    } else if (cudaMallocAsync(&owned, bytes, stream) == cudaSuccess) {
      workspace = owned;
    } else {
      cudaGetLastError();
      return ffi::Error::Internal(std::string(kTarget) + ": no memory for the workspace");
    }
  }
  const cuda::GemmStatus status = cuda::Fp8BlockGemm(problem, workspace, stream);
  if (owned != nullptr) cudaFreeAsync(owned, stream);
  return LaunchStatusError(kTarget, status, ffi::ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(Fp8BlockGemmCuda, eqx_quant::Fp8BlockGemmCudaImpl,
                              eqx_quant::BindCudaStream()
                                  .Ctx<xla::ffi::ScratchAllocator>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Attr<bool>("b_tiles"));
