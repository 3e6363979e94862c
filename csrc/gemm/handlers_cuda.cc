// XLA FFI handler of eqx_quant_grouped_gemm_cuda (gemm/grouped_gemm_cuda.h,
// docs/gemm.md): the buffers checked against the attributes, then the
// grouped GEMM enqueued on XLA's stream with its per-call arguments in XLA's
// scratch memory. The host never waits on the device.
//
//   Arg 0  a          BF16 | F8E4M3FN | F8E5M2   M*K elements
//   Arg 1  b          BF16 | F8E4M3FN | F8E5M2   kRows: G*K*N; kWgrad: M*N
//   Arg 2  counts     S32                        (G,)
//   Arg 3  alpha      F32                        (G,), or (0,) for none
//   Arg 4  first_row  S32                        (1,)
//   Ret 0  out        BF16 | F32                 kRows: M*N; kWgrad: G*K*N
//   Attrs  kind: int64 (0 kRows, 1 kWgrad), transposed: bool,
//          m, k, n: int64, tile_m, tile_n: int64 and fast_accum: bool (the
//          kernel asked for, a preference: gemm/grouped_gemm_cuda.h)

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>

#include "ffi/cuda_launch_error.h"
#include "gemm/grouped_gemm_cuda.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;
constexpr const char* kTarget = "eqx_quant_grouped_gemm_cuda";

std::optional<cuda::GemmElement> ElementOf(ffi::DataType type) {
  switch (type) {
    case ffi::DataType::BF16:
      return cuda::GemmElement::kBf16;
    case ffi::DataType::F8E4M3FN:
      return cuda::GemmElement::kE4m3;
    case ffi::DataType::F8E5M2:
      return cuda::GemmElement::kE5m2;
    case ffi::DataType::F32:
      return cuda::GemmElement::kF32;
    default:
      return std::nullopt;
  }
}

ffi::Error Invalid(const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(kTarget) + ": " + what);
}

// XLA's scratch memory where it hands it out, else stream-ordered memory
// (cudaMallocAsync: no host sync), freed on the stream after the launches.
struct CallScratch {
  ffi::ScratchAllocator* xla;
  cudaStream_t stream;
  void* owned[4] = {};
  int count = 0;
};

void* AllocateScratch(void* context, size_t bytes) {
  auto* scratch = static_cast<CallScratch*>(context);
  if (std::optional<void*> got = scratch->xla->Allocate(bytes, 256)) return *got;
  if (scratch->count == 4) return nullptr;
  void* memory = nullptr;
  if (cudaMallocAsync(&memory, bytes, scratch->stream) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  scratch->owned[scratch->count++] = memory;
  return memory;
}

ffi::Error GroupedGemmCudaImpl(cudaStream_t stream,
                               ffi::ScratchAllocator scratch, ffi::AnyBuffer a,
                               ffi::AnyBuffer b, ffi::AnyBuffer counts,
                               ffi::AnyBuffer alpha, ffi::AnyBuffer first_row,
                               ffi::Result<ffi::AnyBuffer> out, int64_t kind,
                               bool transposed, int64_t m, int64_t k,
                               int64_t n, int64_t tile_m, int64_t tile_n,
                               bool fast_accum) {
  if (kind != 0 && kind != 1) return Invalid("kind must be 0 or 1");
  if (m < 0 || k < 0 || n < 0) return Invalid("negative m, k or n");
  const int64_t groups = static_cast<int64_t>(counts.element_count());
  const bool rows = kind == 0;
  const auto a_type = ElementOf(a.element_type());
  const auto b_type = ElementOf(b.element_type());
  const auto out_type = ElementOf(out->element_type());
  if (!a_type || !b_type || *a_type == cuda::GemmElement::kF32 ||
      *b_type == cuda::GemmElement::kF32) {
    return Invalid("a and b must be BF16, F8E4M3FN or F8E5M2");
  }
  if (!out_type || (*out_type != cuda::GemmElement::kBf16 &&
                    *out_type != cuda::GemmElement::kF32)) {
    return Invalid("out must be BF16 or F32");
  }
  if (counts.element_type() != ffi::DataType::S32 ||
      first_row.element_type() != ffi::DataType::S32 ||
      first_row.element_count() != 1) {
    return Invalid("counts must be S32 (G,) and first_row S32 (1,)");
  }
  if (alpha.element_type() != ffi::DataType::F32 ||
      (alpha.element_count() != 0 &&
       static_cast<int64_t>(alpha.element_count()) != groups)) {
    return Invalid("alpha must be F32 of G elements or none");
  }
  const int64_t b_elements = rows ? groups * k * n : m * n;
  const int64_t out_elements = rows ? m * n : groups * k * n;
  if (static_cast<int64_t>(a.element_count()) != m * k ||
      static_cast<int64_t>(b.element_count()) != b_elements ||
      static_cast<int64_t>(out->element_count()) != out_elements) {
    return Invalid("buffer sizes do not match m = " + std::to_string(m) +
                   ", k = " + std::to_string(k) + ", n = " +
                   std::to_string(n) + ", G = " + std::to_string(groups));
  }
  cuda::GroupedGemmProblem problem;
  problem.kind = rows ? cuda::GroupedGemmKind::kRows
                      : cuda::GroupedGemmKind::kWgrad;
  problem.m = m;
  problem.k = k;
  problem.n = n;
  problem.groups = groups;
  problem.a_type = *a_type;
  problem.b_type = *b_type;
  problem.out_type = *out_type;
  problem.transposed = transposed;
  problem.tile_m = static_cast<int>(tile_m);
  problem.tile_n = static_cast<int>(tile_n);
  problem.fast_accum = fast_accum;
  problem.a = a.untyped_data();
  problem.b = b.untyped_data();
  problem.counts = static_cast<const int32_t*>(counts.untyped_data());
  problem.first_row = static_cast<const int32_t*>(first_row.untyped_data());
  problem.alpha = alpha.element_count() == 0
                      ? nullptr
                      : static_cast<const float*>(alpha.untyped_data());
  problem.out = out->untyped_data();
  if (!cuda::GroupedGemmSupported(problem)) {
    return Invalid(
        "no kernel for these element types and layouts (FP8 operands must "
        "both be K-contiguous: transposed = true)");
  }
  const int64_t element_bytes[] = {2, 1, 1, 4};
  const int64_t row_bytes[] = {k * element_bytes[static_cast<int>(*a_type)],
                               n * element_bytes[static_cast<int>(*out_type)]};
  if (row_bytes[0] % 16 != 0 || row_bytes[1] % 16 != 0 ||
      (k * element_bytes[static_cast<int>(*b_type)]) % 16 != 0 ||
      (n * element_bytes[static_cast<int>(*b_type)]) % 16 != 0) {
    return Invalid("K and N must make rows of a multiple of 16 bytes");
  }
  CallScratch call_scratch{&scratch, stream};
  const cuda::GemmStatus status = cuda::GroupedGemm(
      problem, cuda::DeviceScratch{&AllocateScratch, &call_scratch}, stream);
  for (int i = 0; i < call_scratch.count; ++i) {
    cudaFreeAsync(call_scratch.owned[i], stream);
  }
  return LaunchStatusError(kTarget, status, ffi::ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    GroupedGemmCuda, eqx_quant::GroupedGemmCudaImpl,
    eqx_quant::BindCudaStream()
        .Ctx<xla::ffi::ScratchAllocator>()
        .Arg<xla::ffi::AnyBuffer>()  // a
        .Arg<xla::ffi::AnyBuffer>()  // b
        .Arg<xla::ffi::AnyBuffer>()  // counts
        .Arg<xla::ffi::AnyBuffer>()  // alpha
        .Arg<xla::ffi::AnyBuffer>()  // first_row
        .Ret<xla::ffi::AnyBuffer>()  // out
        .Attr<int64_t>("kind")
        .Attr<bool>("transposed")
        .Attr<int64_t>("m")
        .Attr<int64_t>("k")
        .Attr<int64_t>("n")
        .Attr<int64_t>("tile_m")
        .Attr<int64_t>("tile_n")
        .Attr<bool>("fast_accum"));
