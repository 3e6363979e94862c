// The CPU handlers' ParallelFor (common/parallel_for.h) on XLA's intra-op
// thread pool, the xla::ffi::ThreadPool context XLA hands each handler: the
// kernels split their work over the threads XLA computes with, never over a
// pool of our own.
//
// A call runs its tasks on the calling thread and on up to threads - 1
// helpers scheduled on the pool. Every participant claims task indices from
// one shared counter until none is left, so the call never waits for a
// helper that has not started (XLA runs the handler on the caller's thread or
// on a pool thread; with a pool of one thread, or a busy one, the caller
// simply runs every task itself). A helper that starts after the last task
// was claimed finds nothing to do; the state it touches is shared-owned, so
// it outlives the call. Each helper puts its thread into the IEEE float mode
// the kernels need (common/scoped_ieee_float_env.h), as the handler does for
// the calling thread.

#ifndef EQX_QUANT_CSRC_FFI_CPU_THREAD_POOL_H_
#define EQX_QUANT_CSRC_FFI_CPU_THREAD_POOL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "common/parallel_for.h"
#include "common/scoped_ieee_float_env.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// Bind() with the thread pool context: a CPU handler's first parameter is
// then `xla::ffi::ThreadPool pool`.
inline auto BindCpuThreadPool() {
  return xla::ffi::Ffi::Bind().Ctx<xla::ffi::ThreadPool>();
}

namespace cpu_thread_pool_internal {

// The state of one ParallelFor call, shared by the caller and its helpers.
class Batch {
 public:
  Batch(int64_t count, TaskRef task) : count_(count), task_(task) {}

  // Runs unclaimed tasks until none is left.
  void Work() {
    int64_t finished = 0;
    for (int64_t i = next_.fetch_add(1); i < count_; i = next_.fetch_add(1)) {
      task_(i);
      ++finished;
    }
    if (finished > 0 && done_.fetch_add(finished) + finished == count_) {
      std::lock_guard<std::mutex> lock(mutex_);
      all_done_.notify_all();
    }
  }

  void WaitAll() {
    std::unique_lock<std::mutex> lock(mutex_);
    all_done_.wait(lock, [this] { return done_.load() == count_; });
  }

 private:
  const int64_t count_;
  const TaskRef task_;  // only called for claimed indices < count_
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> done_{0};
  std::mutex mutex_;
  std::condition_variable all_done_;
};

inline void RunOnXlaPool(void* context, int64_t count, TaskRef task) {
  auto& pool = *static_cast<xla::ffi::ThreadPool*>(context);
  const auto batch = std::make_shared<Batch>(count, task);
  const int64_t helpers = std::min(pool.num_threads(), count) - 1;
  for (int64_t h = 0; h < helpers; ++h) {
    pool.Schedule([batch] {
      ScopedIeeeFloatEnv ieee_float_env;
      batch->Work();
    });
  }
  batch->Work();
  batch->WaitAll();
}

}  // namespace cpu_thread_pool_internal

// A ParallelFor over `pool` (which must outlive it); serial when XLA reports
// no threads.
inline ParallelFor MakeParallelFor(xla::ffi::ThreadPool& pool) {
  return ParallelFor(pool.num_threads(),
                     &cpu_thread_pool_internal::RunOnXlaPool, &pool);
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_CPU_THREAD_POOL_H_
