// The "parallel for" the CPU kernels split their work with. Plain C++, no
// XLA types: the FFI handlers back it with XLA's intra-op thread pool
// (ffi/cpu_thread_pool.h), a default-constructed one runs every task on the
// calling thread (host tests, callers without a pool), and a host test can
// back it with threads of its own.
//
// The contract that keeps results bit-identical whatever the thread count:
// the tasks of one call are independent (each writes bytes no other task
// writes), and any per-task partial result (an amax key, a column's sum) is
// combined by the caller after the call returns, in an order fixed by the task
// index, never by which thread ran what or when. The amax keys are combined
// with max (exact in any order); dbias sums are only ever split by columns or
// at nodes of the canonical tree (common/tree_sum.h).
//
// Header-only, no dependencies beyond the standard library.

#ifndef EQX_QUANT_CSRC_COMMON_PARALLEL_FOR_H_
#define EQX_QUANT_CSRC_COMMON_PARALLEL_FOR_H_

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace eqx_quant {

// A non-owning reference to a callable `void(int64_t task)`; the callable
// must outlive every call made through the reference. Copies refer to the
// same callable (the constructor below never takes a TaskRef).
class TaskRef {
 public:
  template <typename Fn, typename = std::enable_if_t<
                             !std::is_same_v<std::remove_cv_t<Fn>, TaskRef>>>
  explicit TaskRef(Fn& fn)
      : object_(static_cast<void*>(&fn)), call_(&CallObject<Fn>) {}

  void operator()(int64_t task) const { call_(object_, task); }

 private:
  template <typename Fn>
  static void CallObject(void* object, int64_t task) {
    (*static_cast<Fn*>(object))(task);
  }

  void* object_;
  void (*call_)(void*, int64_t);
};

class ParallelFor {
 public:
  // Must call task(i) exactly once for every i in [0, count), on any threads
  // and in any order, and return when every call has returned.
  using Backend = void (*)(void* context, int64_t count, TaskRef task);

  // Serial: every task on the calling thread, in increasing order.
  ParallelFor() = default;

  // `threads` (>= 1): how many tasks the backend can run at once.
  ParallelFor(int64_t threads, Backend backend, void* context)
      : threads_(std::max<int64_t>(1, threads)),
        backend_(backend),
        context_(context) {}

  int64_t threads() const { return backend_ != nullptr ? threads_ : 1; }

  // fn(i) for i in [0, count): on the calling thread when there is one task
  // or one thread, else through the backend.
  template <typename Fn>
  void operator()(int64_t count, Fn&& fn) const {
    if (count <= 0) return;
    if (count == 1 || threads() <= 1) {
      for (int64_t i = 0; i < count; ++i) fn(i);
      return;
    }
    TaskRef task(fn);
    backend_(context_, count, task);
  }

 private:
  int64_t threads_ = 1;
  Backend backend_ = nullptr;
  void* context_ = nullptr;
};

// Tasks per thread when a range is split: a few, so that a thread slowed by
// another job on its core does not hold up the call.
inline constexpr int64_t kTasksPerThread = 4;

// How [0, total) is cut: `count` pieces of `size` units (the last one
// shorter), `size` a multiple of `align`.
struct RangeSplit {
  int64_t size = 0;
  int64_t count = 0;

  int64_t begin(int64_t piece) const { return piece * size; }
  int64_t end(int64_t piece, int64_t total) const {
    return std::min(total, (piece + 1) * size);
  }
};

// Pieces of at least `min_units` units (a multiple of `align` >= 1, except
// the last), at most kTasksPerThread per thread; one piece (no split) when
// total < 2 * min_units or there is one thread. Depends only on the
// arguments, never on timing.
inline RangeSplit SplitRange(int64_t total, int64_t threads, int64_t min_units,
                             int64_t align) {
  align = std::max<int64_t>(1, align);
  RangeSplit split;
  if (total <= 0) return split;
  const int64_t by_size =
      threads > 1 ? total / std::max<int64_t>(1, min_units) : 1;
  const int64_t pieces =
      std::max<int64_t>(1, std::min(threads * kTasksPerThread, by_size));
  int64_t size = (total + pieces - 1) / pieces;
  size = (size + align - 1) / align * align;
  split.size = size;
  split.count = (total + size - 1) / size;
  return split;
}

// fn(begin, end) over the pieces of SplitRange(total, parallel.threads(),
// min_units, align), in parallel.
template <typename Fn>
void ParallelRanges(const ParallelFor& parallel, int64_t total,
                    int64_t min_units, int64_t align, Fn&& fn) {
  const RangeSplit split =
      SplitRange(total, parallel.threads(), min_units, align);
  parallel(split.count, [&](int64_t piece) {
    fn(split.begin(piece), split.end(piece, total));
  });
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_COMMON_PARALLEL_FOR_H_
