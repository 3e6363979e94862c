// The ParallelFor backends of the host tests that check that a CPU kernel
// gives the same bytes whatever the thread count
// (csrc/tests/*_parallel_test.cc): a fake pool of N threads of the test's own
// (standing in for XLA's intra-op pool, which the FFI handlers use), and a
// serial backend that runs the tasks in reverse order (any order dependence
// shows up without a race). Also the random inputs those tests share.

#ifndef EQX_QUANT_CSRC_TESTS_PARALLEL_TEST_POOLS_H_
#define EQX_QUANT_CSRC_TESTS_PARALLEL_TEST_POOLS_H_

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "common/parallel_for.h"

namespace eqx_quant::host_test {

// N threads started per call, each claiming task indices from one counter
// until none is left (so the task-to-thread mapping changes from run to run).
inline void RunOnThreads(void* context, int64_t count, TaskRef task) {
  const int64_t threads = *static_cast<const int64_t*>(context);
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      task(i);
    }
  };
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
}

// Every task on the calling thread, the last one first.
inline void RunReversed(void* /*context*/, int64_t count, TaskRef task) {
  for (int64_t i = count - 1; i >= 0; --i) task(i);
}

// The backends a test compares against ParallelFor() (serial, in order): N
// threads for N in kThreadCounts, and the reversed serial one claiming 8
// threads (so that the kernels split as for 8).
inline const int64_t kThreadCounts[] = {2, 3, 8};
inline const int64_t kReversedThreads = 8;

inline std::vector<ParallelFor> TestBackends() {
  std::vector<ParallelFor> backends;
  for (const int64_t& n : kThreadCounts) {
    backends.emplace_back(n, &RunOnThreads,
                          const_cast<void*>(static_cast<const void*>(&n)));
  }
  backends.emplace_back(kReversedThreads, &RunReversed, nullptr);
  return backends;
}

// Random f32 values: a wide range of exponents, both signs, some zeros and
// subnormals, and about one infinity and one NaN per 2^22 values (rare, so
// that most parts of a tensor have different amaxes).
inline float RandomValue(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> kind(0, (1 << 22) - 1);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-12, 12);
  const float sign = (rng() & 1) ? -1.0f : 1.0f;
  const int k = kind(rng);
  if (k % 64 == 4) return sign * 0.0f;
  if (k % 64 == 5) return sign * 1e-40f;
  if (k == 2) return sign * std::numeric_limits<float>::infinity();
  if (k == 3) return std::numeric_limits<float>::quiet_NaN();
  return sign * std::ldexp(mant(rng), expo(rng));
}

// `count` random elements of f32 (4 bytes each) or bf16 (2 bytes each).
inline std::vector<uint8_t> RandomInput(std::mt19937_64& rng, int64_t count,
                                        bool f32) {
  std::vector<uint8_t> bytes(static_cast<size_t>(count * (f32 ? 4 : 2)));
  for (int64_t i = 0; i < count; ++i) {
    const float v = RandomValue(rng);
    if (f32) {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t half = static_cast<uint16_t>(bits >> 16);
      std::memcpy(bytes.data() + 2 * i, &half, 2);
    }
  }
  return bytes;
}

}  // namespace eqx_quant::host_test

#endif  // EQX_QUANT_CSRC_TESTS_PARALLEL_TEST_POOLS_H_
