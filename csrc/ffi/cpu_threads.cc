// CpuThreads: a tiny CPU FFI handler that writes the size of XLA's
// intra-op thread pool (the threads the CPU kernels split their work over,
// ffi/cpu_thread_pool.h) to a (1,) int32 result; 0 when XLA gives the
// handler no pool. For reports, not for any op: python -m eqx_quant.bench
// registers it as eqx_quant_bench_cpu_threads (eqx_quant/bench/_threads.py)
// and prints it.

#include <cstdint>

#include "ffi/cpu_thread_pool.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {
namespace {

namespace ffi = xla::ffi;

ffi::Error CpuThreadsImpl(ffi::ThreadPool pool,
                          ffi::ResultBuffer<ffi::S32> threads) {
  if (threads->element_count() != 1) {
    return ffi::Error::InvalidArgument(
        "eqx_quant_bench_cpu_threads: the result must have one element");
  }
  threads->typed_data()[0] = static_cast<int32_t>(pool.num_threads());
  return ffi::Error::Success();
}

}  // namespace
}  // namespace eqx_quant

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    CpuThreads, eqx_quant::CpuThreadsImpl,
    eqx_quant::BindCpuThreadPool().Ret<xla::ffi::Buffer<xla::ffi::S32>>());
