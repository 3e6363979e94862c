// Shared by the standalone probes (not part of the library): error checks and
// the median time per launch of a body of back-to-back launches, with CUDA
// events (8 warm-up calls, then kBatches batches of kLaunches calls).

#ifndef EQX_QUANT_CI_PROBES_PROBE_TIMING_H_
#define EQX_QUANT_CI_PROBES_PROBE_TIMING_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace probe {

inline void Check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

// Median over kBatches of (event time of kLaunches calls of body(i)) /
// kLaunches, in microseconds.
template <int kLaunches, int kBatches, typename Body>
double MedianMicroseconds(Body body, cudaStream_t stream) {
  cudaEvent_t start;
  cudaEvent_t stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < 8; ++i) body(i);
  std::vector<double> us;
  for (int b = 0; b < kBatches; ++b) {
    Check(cudaEventRecord(start, stream), "record");
    for (int i = 0; i < kLaunches; ++i) body(i);
    Check(cudaEventRecord(stop, stream), "record");
    Check(cudaEventSynchronize(stop), "synchronize");
    float ms = 0.0f;
    Check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    us.push_back(1000.0 * ms / kLaunches);
  }
  std::sort(us.begin(), us.end());
  Check(cudaEventDestroy(start), "event");
  Check(cudaEventDestroy(stop), "event");
  return us[kBatches / 2];
}

}  // namespace probe

#endif  // EQX_QUANT_CI_PROBES_PROBE_TIMING_H_
