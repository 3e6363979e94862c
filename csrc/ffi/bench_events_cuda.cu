// CUDA-event timing for `python -m eqx_quant.bench` (not a quantize op: it is
// registered by eqx_quant/bench/_timing.py itself, not by
// eqx_quant/_ops/_ffi.py).
//
// BenchEventCuda (FFI target eqx_quant_bench_event_cuda): records the CUDA
//   event of slot `slot` on XLA's stream and passes its first operand (a small
//   token) through to its result. _timing.py aliases the result to that
//   operand (input_output_aliases={0: 0}), so the pass-through is free; were
//   the two buffers distinct, the bytes are copied first (cudaMemcpyAsync), so
//   that the copy lies before the event, never after it. Any further operands are
//   never touched: they only make the event depend on their producers (the
//   outputs of the timed op), which XLA must then finish, in their default
//   layout, before the event.
// BenchDelayCuda (FFI target eqx_quant_bench_delay_cuda): the same
//   pass-through, after a one-thread kernel that spins on the GPU for `ns`
//   nanoseconds. Put in front of the timed ops, it keeps the GPU busy while the
//   host enqueues them, so that the GPU never waits for the host inside a
//   bracket and the events measure device time only.
// EqxqBenchElapsedMs(a, b, &ms) (ctypes): waits for event b, then the
//   milliseconds between events a and b. EqxqBenchReset() (ctypes): forgets
//   which slots were recorded, so that a slot that a later run fails to record
//   is reported (-2) instead of giving a stale time. EqxqBenchSlots(): the
//   pool size.
//
// Neither handler declares kCmdBufferCompatible: a CUDA event recorded while
// XLA captures a CUDA graph would not be recorded at each launch of the graph
// (and cudaEventRecord is not allowed on a capturing stream), so XLA must run
// them as plain thunks on its stream.
//
// The events (default flags, so they carry timing) are created lazily on the
// device current when a slot is first recorded; a slot recorded later on
// another device gets a fresh event. They are never destroyed: the pool lives
// as long as the process.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

constexpr int64_t kSlots = 4096;
// One spin longer than this is a bug of the caller, not a wish.
constexpr int64_t kMaxDelayNs = int64_t{1000} * 1000 * 1000;

// Returned by EqxqBenchElapsedMs besides the cudaError_t values (all >= 0).
constexpr int kBadSlot = -1;
constexpr int kNotRecorded = -2;
constexpr int kOtherDevice = -3;

struct EventPool {
  std::mutex mutex;
  cudaEvent_t event[kSlots] = {};
  int device[kSlots] = {};
  bool recorded[kSlots] = {};
};

EventPool& Pool() {
  // Never destroyed: CUDA may already be torn down when statics are.
  static EventPool* pool = new EventPool;
  return *pool;
}

ffi::Error CudaFailure(const char* target, const char* what, cudaError_t error) {
  return ffi::Error::Internal(std::string(target) + ": " + what + " failed: " +
                              cudaGetErrorName(error) + ": " +
                              cudaGetErrorString(error));
}

// result <- operand, on `stream`; nothing when XLA aliased the two buffers.
ffi::Error PassThrough(const char* target, cudaStream_t stream,
                       const ffi::AnyBuffer& operand,
                       const ffi::AnyBuffer& result) {
  const size_t bytes = operand.size_bytes();
  if (result.size_bytes() != bytes) {
    return ffi::Error::InvalidArgument(
        std::string(target) + ": the result has " +
        std::to_string(result.size_bytes()) + " bytes, the operand " +
        std::to_string(bytes));
  }
  void* const src = operand.untyped_data();
  void* const dst = result.untyped_data();
  if (bytes == 0 || src == dst) return ffi::Error::Success();
  const cudaError_t error =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
  if (error != cudaSuccess) return CudaFailure(target, "cudaMemcpyAsync", error);
  return ffi::Error::Success();
}

ffi::Error BenchEventCudaImpl(cudaStream_t stream, ffi::AnyBuffer operand,
                              ffi::RemainingArgs /*after*/,
                              ffi::Result<ffi::AnyBuffer> result, int64_t slot) {
  constexpr char kTarget[] = "eqx_quant_bench_event_cuda";
  if (slot < 0 || slot >= kSlots) {
    return ffi::Error::InvalidArgument(std::string(kTarget) + ": slot " +
                                       std::to_string(slot) + " is not in [0, " +
                                       std::to_string(kSlots) + ")");
  }
  ffi::Error passed = PassThrough(kTarget, stream, operand, *result);
  if (passed.failure()) return passed;

  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return CudaFailure(kTarget, "cudaGetDevice", error);

  EventPool& pool = Pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  if (pool.event[slot] != nullptr && pool.device[slot] != device) {
    // Created on another device: leave it (destroying it needs that device
    // current) and make a fresh one here.
    pool.event[slot] = nullptr;
  }
  if (pool.event[slot] == nullptr) {
    cudaEvent_t event = nullptr;
    error = cudaEventCreate(&event);
    if (error != cudaSuccess) return CudaFailure(kTarget, "cudaEventCreate", error);
    pool.event[slot] = event;
    pool.device[slot] = device;
  }
  pool.recorded[slot] = false;
  error = cudaEventRecord(pool.event[slot], stream);
  if (error != cudaSuccess) return CudaFailure(kTarget, "cudaEventRecord", error);
  pool.recorded[slot] = true;
  return ffi::Error::Success();
}

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

__global__ void SpinKernel(uint64_t ns) {
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(1000);
#endif
  }
}

ffi::Error BenchDelayCudaImpl(cudaStream_t stream, ffi::AnyBuffer operand,
                              ffi::Result<ffi::AnyBuffer> result, int64_t ns) {
  constexpr char kTarget[] = "eqx_quant_bench_delay_cuda";
  if (ns < 0 || ns > kMaxDelayNs) {
    return ffi::Error::InvalidArgument(std::string(kTarget) + ": ns " +
                                       std::to_string(ns) + " is not in [0, " +
                                       std::to_string(kMaxDelayNs) + "]");
  }
  if (ns > 0) {
    SpinKernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(ns));
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) return CudaFailure(kTarget, "SpinKernel launch", error);
  }
  return PassThrough(kTarget, stream, operand, *result);
}

}  // namespace
}  // namespace eqx_quant

// No traits: see the top of the file (kCmdBufferCompatible must stay unset).
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    BenchEventCuda, eqx_quant::BenchEventCudaImpl,
    xla::ffi::Ffi::Bind()
        .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
        .Arg<xla::ffi::AnyBuffer>()  // the token
        .RemainingArgs()             // buffers the event must follow
        .Ret<xla::ffi::AnyBuffer>()  // the token again (aliased)
        .Attr<int64_t>("slot"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    BenchDelayCuda, eqx_quant::BenchDelayCudaImpl,
    xla::ffi::Ffi::Bind()
        .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
        .Arg<xla::ffi::AnyBuffer>()
        .Ret<xla::ffi::AnyBuffer>()
        .Attr<int64_t>("ns"));

#define EQX_QUANT_BENCH_EXPORT extern "C" __attribute__((visibility("default")))

// 0 on success; a cudaError_t value (> 0) when CUDA fails; -1 for a slot out
// of range or a null `ms`; -2 when slot a or b was not recorded since the last
// EqxqBenchReset; -3 when they were recorded on different devices.
EQX_QUANT_BENCH_EXPORT int EqxqBenchElapsedMs(int64_t a, int64_t b, float* ms) {
  using eqx_quant::kSlots;
  if (ms == nullptr || a < 0 || a >= kSlots || b < 0 || b >= kSlots) {
    return eqx_quant::kBadSlot;
  }
  cudaEvent_t start;
  cudaEvent_t end;
  int device;
  {
    eqx_quant::EventPool& pool = eqx_quant::Pool();
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (!pool.recorded[a] || !pool.recorded[b]) return eqx_quant::kNotRecorded;
    if (pool.device[a] != pool.device[b]) return eqx_quant::kOtherDevice;
    start = pool.event[a];
    end = pool.event[b];
    device = pool.device[a];
  }
  // The events belong to the (primary) context of their device; make it the
  // calling thread's current one for the two calls, then restore.
  int previous = 0;
  cudaError_t error = cudaGetDevice(&previous);
  if (error != cudaSuccess) return static_cast<int>(error);
  if (previous != device) {
    error = cudaSetDevice(device);
    if (error != cudaSuccess) return static_cast<int>(error);
  }
  error = cudaEventSynchronize(end);
  if (error == cudaSuccess) error = cudaEventElapsedTime(ms, start, end);
  if (previous != device) {
    const cudaError_t restored = cudaSetDevice(previous);
    if (error == cudaSuccess) error = restored;
  }
  return static_cast<int>(error);
}

// Forgets every recording (the events themselves are kept for reuse). Call it
// only while no timed computation is in flight. Returns 0.
EQX_QUANT_BENCH_EXPORT int EqxqBenchReset(void) {
  eqx_quant::EventPool& pool = eqx_quant::Pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  for (int64_t slot = 0; slot < eqx_quant::kSlots; ++slot) {
    pool.recorded[slot] = false;
  }
  return 0;
}

// The number of event slots (slot attributes must be in [0, this)).
EQX_QUANT_BENCH_EXPORT int64_t EqxqBenchSlots(void) {
  return eqx_quant::kSlots;
}
