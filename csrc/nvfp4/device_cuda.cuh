// Device helpers of the NVFP4 CUDA kernels (nvfp4/quantize_cuda.cu,
// nvfp4/tile_cuda.cu, nvfp4/amax_cuda.cu): the input element
// types, the stochastic-rounding index, memory and launch helpers, on top of
// the arithmetic of nvfp4/math_cuda.cuh and
// nvfp4/stochastic_math_cuda.cuh. Internal to those files.

#ifndef EQX_QUANT_CSRC_NVFP4_DEVICE_CUDA_CUH_
#define EQX_QUANT_CSRC_NVFP4_DEVICE_CUDA_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "common/nvfp4_format.h"
#include "common/nvfp4_problem.h"
#include "common/threefry.h"
#include "cuda/cp_async.cuh"
#include "cuda/sm_count.h"
#include "nvfp4/math_cuda.cuh"
#include "nvfp4/quantize_cuda.h"
#include "nvfp4/stochastic_math_cuda.cuh"

namespace eqx_quant::cuda::nvfp4 {

// ---------------------------------------------------------------------------
// Input types.

// The three input types: f32 of one element (exact conversions).
__device__ __forceinline__ float HalfToFloat(uint32_t bits16) {
  float value;  // cvt.f32.f16 is exact, subnormals included
  asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(static_cast<uint16_t>(bits16)));
  return value;
}

struct F32In {
  using Storage = float;
  static constexpr int kVec = 4;  // elements per 16 bytes
  static __device__ __forceinline__ float Convert(float s) { return s; }
  static __device__ __forceinline__ float Element(const uint32_t* w, int e) {
    return __uint_as_float(w[e]);
  }
};

struct Bf16In {
  using Storage = uint16_t;
  static constexpr int kVec = 8;
  static __device__ __forceinline__ float Convert(uint16_t s) {
    return __uint_as_float(static_cast<uint32_t>(s) << 16);
  }
  static __device__ __forceinline__ float Element(const uint32_t* w, int e) {
    return __uint_as_float(e % 2 ? w[e / 2] & 0xFFFF0000u : w[e / 2] << 16);
  }
};

struct F16In {
  using Storage = uint16_t;
  static constexpr int kVec = 8;
  static __device__ __forceinline__ float Convert(uint16_t s) {
    return HalfToFloat(s);
  }
  static __device__ __forceinline__ float Element(const uint32_t* w, int e) {
    return HalfToFloat(e % 2 ? w[e / 2] >> 16 : w[e / 2] & 0xFFFFu);
  }
};

// N values held as N * sizeof(Storage) bytes of words.
template <typename In, int N>
__device__ __forceinline__ void Unpack(const uint32_t* w, float (&v)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) v[e] = In::Element(w, e);
}

// q = n / d and r = n - q * d for n >= 0, d >= 1. `narrow` (both < 2^32):
// one 32-bit division; otherwise a restoring shift-subtract loop, so that no
// kernel calls the 64-bit division routine (whose call spills registers).
__device__ __forceinline__ int64_t DivMod(int64_t n, int64_t d, bool narrow,
                                          int64_t& r) {
  if (narrow) {
    const uint32_t q32 = static_cast<uint32_t>(n) / static_cast<uint32_t>(d);
    r = n - static_cast<int64_t>(q32) * d;
    return q32;
  }
  const uint64_t un = static_cast<uint64_t>(n);
  const uint64_t ud = static_cast<uint64_t>(d);
  uint64_t q = 0;
  uint64_t rem = 0;
  for (int bit = 63 - __clzll(static_cast<long long>(un | 1)); bit >= 0;
       --bit) {
    rem = (rem << 1) | ((un >> bit) & 1u);
    if (rem >= ud) {
      rem -= ud;
      q |= uint64_t{1} << bit;
    }
  }
  r = static_cast<int64_t>(rem);
  return static_cast<int64_t>(q);
}

// The encode multipliers of the 128 scale bytes 0..127 under `ts` (times
// 1/8 where `eighth`; the caller checks that this is exact) into the CTA's
// shared `table`, between two barriers: the readers of the previous
// example's table are done before, the new table is whole after.
__device__ __forceinline__ void FillEncodeTable(float* table,
                                                const Nvfp4TensorScale& ts,
                                                bool eighth = false) {
  __syncthreads();
  if (threadIdx.x < 128) {
    const float enc =
        Nvfp4EncodeMultiplier(static_cast<uint8_t>(threadIdx.x), ts);
    table[threadIdx.x] = eighth ? MulRn(enc, 0.125f) : enc;
  }
  __syncthreads();
}

// The stochastic-rounding indices of an element (docs/block_formats.md):
// rowwise ravel(s + offset, G) and colwise ravel(T(s + offset), T(G)) mod
// 2^64, T(v) = v[fa:] + v[:fa] the colwise (T layout) order and G the global
// shape, as the CPU kernel computes them: one term per dim d of S,
// uint64(uint32(s_d) + uint32(offset_d)) * the dim's stride in x (rowwise)
// or in the T layout (colwise).
constexpr int kMaxSrRank = 32;

struct SrLayout {
  const int32_t* offset;            // n entries, device memory
  int n;                            // rank of S
  bool narrow;                      // prod(S) < 2^32: 32-bit divisions
  int64_t shape[kMaxSrRank];        // S
  uint64_t stride[kMaxSrRank];      // prod(G[d+1:])
  uint64_t col_stride[kMaxSrRank];  // the stride of dim d in T(G)
};

// uint32(coord) + uint32(offset_d): the coordinate of dim d as SrTerm
// multiplies it (a uint32 sum: it wraps like the CPU kernel's).
__device__ __forceinline__ uint32_t SrShifted(const SrLayout& s, int d,
                                              int64_t coord) {
  return static_cast<uint32_t>(coord) +
         static_cast<uint32_t>(__ldg(s.offset + d));
}

// The term of dim d at coordinate `coord` of S, in the rowwise index or
// (kCol) in the colwise one.
template <bool kCol = false>
__device__ __forceinline__ uint64_t SrTerm(const SrLayout& s, int d,
                                           int64_t coord) {
  return static_cast<uint64_t>(SrShifted(s, d, coord)) *
         (kCol ? s.col_stride[d] : s.stride[d]);
}

// Sum of the terms of the row-major multi-index of `linear` over dims
// [begin, end).
template <bool kCol = false>
__device__ __forceinline__ uint64_t SrMulti(const SrLayout& s, int begin,
                                            int end, int64_t linear) {
  uint64_t sum = 0;
  for (int d = end - 1; d >= begin; --d) {
    int64_t coord;
    linear = DivMod(linear, s.shape[d], s.narrow, coord);
    sum += SrTerm<kCol>(s, d, coord);
  }
  return sum;
}

// Stochastically rounded codes of N values times `enc` with their random
// bytes, byte e % 4 of rbytes[e / 4] for element e.
template <int N>
__device__ __forceinline__ void EncodeSrBytes(const float (&v)[N], float enc,
                                              const uint32_t (&rbytes)[N / 4],
                                              bool may_have_nan,
                                              uint32_t (&q)[N / 4]) {
#pragma unroll
  for (int w = 0; w < N / 4; ++w) {
    float y[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) y[e] = MulRn(v[4 * w + e], enc);
    q[w] = E2M1StochasticCodes4(y, rbytes[w], may_have_nan);
  }
}

// The code word of 8 NaN-free 16-bit values v (unpacked from the words w)
// times `enc`, stochastically rounded with their random bytes, byte e % 4 of
// rbytes[e / 4] for element e (E2M1StochasticWord8).
__device__ __forceinline__ uint32_t EncodeSrWord8(const float (&v)[8],
                                                  float enc,
                                                  const uint32_t (&rbytes)[2],
                                                  const uint32_t (&w)[4]) {
  float y[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) y[e] = MulRn(v[e], enc);
  return E2M1StochasticWord8(y, rbytes, w);
}

// The random bytes of N elements (a multiple of 4), byte e % 4 of
// rbytes[e / 4] for element e of index index_of(e) (any indices: one
// Threefry call per element, the byte of its octet selected by the index).
template <int N, typename IndexOf>
__device__ __forceinline__ void SrBytes(uint32_t key0, uint32_t key1,
                                        uint32_t stream, IndexOf index_of,
                                        uint32_t (&rbytes)[N / 4]) {
#pragma unroll
  for (int w = 0; w < N / 4; ++w) {
    rbytes[w] = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      rbytes[w] |= StochasticRoundingByte(key0, key1, index_of(4 * w + e),
                                          stream)
                   << (8 * e);
    }
  }
}

// The random bytes of a run of N elements (a multiple of 4) with consecutive
// indices, byte e % 4 of rbytes[e / 4] for element e: element e has the
// index row + uint32(last + e) (`last`: the term of element 0 in a dim of
// stride 1, the uint32 wrap of s + offset as in SrTerm: the last dim of x
// rowwise, the K dim colwise). The indices are consecutive unless that term
// wraps inside the run: then, and when the low word of the octet counter
// wraps inside the run, one Threefry call per element (SrBytes). Otherwise
// one call per octet the run touches, on counters (lo + o, hi) in 32-bit
// arithmetic: N / 8 calls (1 for N = 4) for a run that starts an octet (the
// usual layouts: last dims and K multiples of 8), one more where the run
// reaches into a further octet. The run's bytes are then the words' bytes
// from byte first % 8 on (funnel shifts).
template <int N>
__device__ __forceinline__ void SrRunBytes(uint32_t key0, uint32_t key1,
                                           uint32_t stream, uint64_t row,
                                           uint32_t last,
                                           uint32_t (&rbytes)[N / 4]) {
  static_assert(N % 4 == 0, "whole code words");
  constexpr int kOctets = (N + 7) / 8;  // touched by a run from an octet start
  const uint64_t first = row + last;
  const uint64_t octet = first >> 3;
  const uint32_t lo = static_cast<uint32_t>(octet);
  const uint32_t hi = StochasticRoundingCounterHigh(octet, stream);
  if (last > 0xFFFFFFFFu - (N - 1) || lo > 0xFFFFFFFFu - kOctets) {
    SrBytes<N>(
        key0, key1, stream,
        [&](int e) { return row + static_cast<uint32_t>(last + e); }, rbytes);
    return;
  }
  const uint32_t skip = static_cast<uint32_t>(first & 7u);
  uint32_t words[2 * kOctets + 2];
#pragma unroll
  for (int o = 0; o < kOctets; ++o) {
    Threefry2x32(key0, key1, lo + o, hi, words[2 * o], words[2 * o + 1]);
  }
  words[2 * kOctets] = 0;
  words[2 * kOctets + 1] = 0;
  if (skip + N > 8 * kOctets) {
    Threefry2x32(key0, key1, lo + kOctets, hi, words[2 * kOctets],
                 words[2 * kOctets + 1]);
  }
  const bool second = (skip & 4u) != 0;  // the run starts in word 1
  const uint32_t shift = 8u * (skip & 3u);
#pragma unroll
  for (int w = 0; w < N / 4; ++w) {
    const uint32_t low = second ? words[w + 1] : words[w];
    const uint32_t high = second ? words[w + 2] : words[w + 1];
    rbytes[w] = __funnelshift_r(low, high, shift);
  }
}

// Stochastically rounded codes of N values times `enc` with consecutive
// indices, element e at row + uint32(last + e) (SrRunBytes).
// `may_have_nan`: whether a value may be NaN (E2M1StochasticCodes4).
template <int N>
__device__ __forceinline__ void EncodeSrRun(const float (&v)[N], float enc,
                                            uint32_t key0, uint32_t key1,
                                            uint32_t stream, uint64_t row,
                                            uint32_t last, bool may_have_nan,
                                            uint32_t (&q)[N / 4]) {
  uint32_t rbytes[N / 4];
  SrRunBytes<N>(key0, key1, stream, row, last, rbytes);
  EncodeSrBytes<N>(v, enc, rbytes, may_have_nan, q);
}

// ---------------------------------------------------------------------------
// Packed E2M1 stores (the F4E2M1FN outputs of eqx_quant_nvfp4_quantize):
// flat element e of a buffer is nibble e % 2 (0 = low) of byte e / 2.

// The 4 codes of a word (one per byte, each <= 15) as 16 bits, code 0 in the
// low nibble.
__device__ __forceinline__ uint32_t PackNibbles4(uint32_t w) {
  const uint32_t t = w | (w >> 4);  // byte 0: c0 | c1 << 4; byte 2: c2 | c3 << 4
  return __byte_perm(t, 0u, 0x4420u) & 0xFFFFu;
}

// The 8 codes of two words as 32 bits, code 0 in the low nibble.
__device__ __forceinline__ uint32_t PackNibbles8(uint32_t w0, uint32_t w1) {
  return __byte_perm(w0 | (w0 >> 4), w1 | (w1 >> 4), 0x6420u);
}

// Nibble `high` of *byte = code, atomically: the other nibble may belong to
// another thread's run.
__device__ __forceinline__ void StoreNibble(uint8_t* byte, bool high,
                                            uint32_t code) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(byte);
  unsigned int* word = reinterpret_cast<unsigned int*>(address & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(address & 3u) * 8u + (high ? 4u : 0u);
  atomicAnd(word, ~(0xFu << shift));
  atomicOr(word, (code & 0xFu) << shift);
}

// 16 codes (q: one per byte) to the elements index .. index + count - 1
// (count <= 16) of the packed buffer `base`: one 8-byte streaming store when
// the run is whole and its bytes 8-byte aligned; else byte stores, and a
// nibble store for a byte shared with the neighbouring runs (an odd index
// or an odd end).
__device__ __forceinline__ void StorePackedCodes(uint8_t* base, int64_t index,
                                                 const uint32_t (&q)[4],
                                                 int count) {
  const uint32_t lo = PackNibbles8(q[0], q[1]);
  const uint32_t hi = PackNibbles8(q[2], q[3]);
  uint8_t* dst = base + (index >> 1);
  if (count == kB && (index & 1) == 0 &&
      (reinterpret_cast<uintptr_t>(dst) & 7u) == 0) {
    __stcs(reinterpret_cast<uint2*>(dst), make_uint2(lo, hi));
    return;
  }
  const uint64_t bits = lo | (static_cast<uint64_t>(hi) << 32);
  const int s = static_cast<int>(index & 1);  // nibble of code 0 in dst[0]
#pragma unroll
  for (int b = 0; b <= kB / 2; ++b) {
    const int n0 = 2 * b - s;  // the codes of the two nibbles of dst[b]
    const int n1 = n0 + 1;
    const bool own0 = n0 >= 0 && n0 < count;
    const bool own1 = n1 >= 0 && n1 < count;
    const uint32_t c0 = own0 ? static_cast<uint32_t>(bits >> (4 * n0)) & 0xFu : 0u;
    const uint32_t c1 = own1 ? static_cast<uint32_t>(bits >> (4 * n1)) & 0xFu : 0u;
    if (own0 && own1) {
      dst[b] = static_cast<uint8_t>(c0 | (c1 << 4));
    } else if (own0 || own1) {
      StoreNibble(dst + b, own1, own0 ? c0 : c1);
    }
  }
}

// A 16-byte load of read-only data that is not reused (not kept in L1).
__device__ __forceinline__ uint4 LoadStreaming(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// The same for 8 bytes.
__device__ __forceinline__ uint2 LoadStreaming8(const void* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
               : "=r"(r.x), "=r"(r.y)
               : "l"(p));
  return r;
}

// Programmatic dependent launch (sm_90); no-ops without the launch attribute.
__device__ __forceinline__ void WaitForPrerequisiteGrids() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void AllowDependentGrids() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Warp max of a key (all lanes get it).
__device__ __forceinline__ uint32_t WarpMax(uint32_t key) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, offset));
  }
  return key;
}

// ---------------------------------------------------------------------------
// Host helpers of the launchers.

inline bool IsAligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A 1-D grid size for `blocks` (>= 1; grid-stride loops cover the rest).
inline unsigned GridSize(int64_t blocks) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(blocks, 0x7FFFFFFF)));
}


inline Nvfp4LaunchStatus CheckLaunch(const char* what) {
  Nvfp4LaunchStatus status;
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    status.ok = false;
    status.cuda_error = static_cast<int>(error);
    status.what = what;
  }
  return status;
}

// EQX_QUANT_CUDA_PDL=0 launches the kernels that support programmatic
// dependent launch without it (plain stream order).
inline bool UsePdl() {
  static const bool use = [] {
    const char* value = std::getenv("EQX_QUANT_CUDA_PDL");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return use;
}

// Launch `kernel` (256 threads, `shared_bytes` of dynamic shared memory, which
// the caller has allowed the kernel) with programmatic dependent launch: it
// may start while the previous kernel on the stream runs, so it must call
// WaitForPrerequisiteGrids() before it reads what that kernel writes.
template <typename Kernel, typename Params>
Nvfp4LaunchStatus LaunchPdl(Kernel kernel, dim3 grid,
                            cudaStream_t stream, const Params& params,
                            const char* what, size_t shared_bytes = 0) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(256);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = UsePdl() ? 1 : 0;
  const cudaError_t error = cudaLaunchKernelEx(&config, kernel, params);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return Nvfp4LaunchStatus{false, static_cast<int>(error), what};
  }
  return CheckLaunch(what);
}

// Resident CTAs per SM of `kernel` with `threads` threads and `shared_bytes`
// of dynamic shared memory (`fallback` if the query fails).
template <typename Kernel>
int ResidentBlocks(Kernel kernel, int threads, int fallback,
                   size_t shared_bytes = 0) {
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, kernel, threads, shared_bytes) != cudaSuccess ||
      blocks <= 0) {
    cudaGetLastError();
    blocks = fallback;
  }
  return blocks;
}

// launch(In{}, rht, sr) for the problem's input type and its use_rht and
// stochastic_rounding flags as std::bool_constant values (the tile and panel
// launchers instantiate one kernel per combination).
template <typename Launch>
Nvfp4LaunchStatus DispatchInputAndModes(const Nvfp4QuantizeProblem& problem,
                                        Launch&& launch) {
  auto modes = [&](auto input) -> Nvfp4LaunchStatus {
    if (problem.use_rht) {
      return problem.stochastic_rounding
                 ? launch(input, std::true_type{}, std::true_type{})
                 : launch(input, std::true_type{}, std::false_type{});
    }
    return problem.stochastic_rounding
               ? launch(input, std::false_type{}, std::true_type{})
               : launch(input, std::false_type{}, std::false_type{});
  };
  switch (problem.view.input_type) {
    case InputType::kF32: return modes(F32In{});
    case InputType::kF16: return modes(F16In{});
    case InputType::kBF16: return modes(Bf16In{});
  }
  return Nvfp4LaunchStatus{false, 0, "unknown input type"};
}

// Resident CTAs per SM the quantize kernels are built for (registers <= 64;
// the stochastic-rounding variants are ALU-bound and get up to 128).
template <bool kSr>
constexpr int kQuantizeMinBlocks = kSr ? 2 : 4;

// The TileKernel launcher (nvfp4/tile_cuda.cu): the colwise and 2D
// problems.
Nvfp4LaunchStatus LaunchTiles(const Nvfp4QuantizeProblem& problem,
                              const Nvfp4QuantizeBuffers& buffers,
                              const SrLayout& sr, cudaStream_t stream);

// The PanelKernel launcher (nvfp4/panel_cuda.cu): problems with a
// colwise part when K % 16 == 0, L % 16 == 0 and the buffers are aligned, 1D,
// or 2D for 16-bit input without stochastic rounding (PanelsApply); faster
// than the tile kernel there.
bool PanelsApply(const Nvfp4QuantizeProblem& problem,
                 const Nvfp4QuantizeBuffers& buffers);
Nvfp4LaunchStatus LaunchPanels(const Nvfp4QuantizeProblem& problem,
                               const Nvfp4QuantizeBuffers& buffers,
                               const SrLayout& sr, cudaStream_t stream);

}  // namespace eqx_quant::cuda::nvfp4

#endif  // EQX_QUANT_CSRC_NVFP4_DEVICE_CUDA_CUH_
