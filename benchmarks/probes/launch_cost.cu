// Probe (not part of the library): what a kernel launch costs on the GPU
// timeline, by kind of launch, measured with CUDA events around many
// back-to-back launches of kernels that do (almost) nothing. Answers whether
// the ~9 us between the cooperative current-scaling kernels' own time and
// their op time (benchmarks/log.md) is the cooperative launch itself.
// Built and run by benchmarks/probes/gpu_launch_cost on the H200 machine:
//   nvcc -O2 -arch=sm_90a -o launch_cost launch_cost.cu && ./launch_cost
// Prints one line per case: microseconds per launch (median of 7 batches), each
// batch queued behind a 5 ms spin so that the host's launch rate (3.7 us per
// launch on the H200 machine) does not set the pace.

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kLaunches = 200;  // per batch
constexpr int kBatches = 7;

// Holds the stream for ~`ns` nanoseconds, so that the host queues a whole
// batch of launches before the first one runs: the batch then measures the
// GPU's own cost per launch, not the host's launch rate.
__global__ void Spin(long long ns) {
  long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  long long now = start;
  while (now - start < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
}

__global__ void Empty(int* sink) {
  if (sink != nullptr && threadIdx.x == 0 && blockIdx.x == 0) *sink = 1;
}

// Touches its dynamic shared memory, so that the launch reserves it.
__global__ void EmptyWithShared(int* sink) {
  extern __shared__ int shared[];
  shared[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (sink != nullptr && threadIdx.x == 0 && blockIdx.x == 0) {
    *sink = shared[kThreads - 1];
  }
}

__global__ void GridSync(int* sink) {
  extern __shared__ int shared[];
  shared[threadIdx.x] = threadIdx.x;
  cg::this_grid().sync();
  if (sink != nullptr && threadIdx.x == 0 && blockIdx.x == 0) {
    *sink = shared[kThreads - 1];
  }
}

void Check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

struct Case {
  const char* name;
  void (*kernel)(int*);
  int grid;
  size_t shared_bytes;
  bool cooperative;
  bool tiny_before;  // a 1-block plain launch before each (like InitKernel)
};

void Launch(const Case& c, int* sink, cudaStream_t stream) {
  if (c.tiny_before) Empty<<<1, 256, 0, stream>>>(sink);
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeCooperative;
  attribute[0].val.cooperative = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(c.grid));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = c.shared_bytes;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = c.cooperative ? 1 : 0;
  Check(cudaLaunchKernelEx(&config, c.kernel, sink), c.name);
}

double MicrosecondsPerLaunch(const Case& c, int* sink, cudaStream_t stream) {
  cudaEvent_t start;
  cudaEvent_t stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < 20; ++i) Launch(c, sink, stream);  // warm up
  std::vector<double> per_launch;
  for (int b = 0; b < kBatches; ++b) {
    Spin<<<1, 1, 0, stream>>>(5'000'000);
    Check(cudaEventRecord(start, stream), "record");
    for (int i = 0; i < kLaunches; ++i) Launch(c, sink, stream);
    Check(cudaEventRecord(stop, stream), "record");
    Check(cudaEventSynchronize(stop), "synchronize");
    float ms = 0.0f;
    Check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    per_launch.push_back(1000.0 * ms / kLaunches);
  }
  std::sort(per_launch.begin(), per_launch.end());
  Check(cudaEventDestroy(start), "event");
  Check(cudaEventDestroy(stop), "event");
  return per_launch[kBatches / 2];
}

}  // namespace

int main() {
  int device = 0;
  int sms = 0;
  int optin = 0;
  Check(cudaGetDevice(&device), "device");
  Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "sms");
  Check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
        "optin");
  const size_t big = 200 * 1024;
  for (auto* kernel : {&Empty, &EmptyWithShared, &GridSync}) {
    Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(big)),
          "shared memory attribute");
  }
  int* sink = nullptr;
  Check(cudaMalloc(&sink, sizeof(int)), "malloc");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const Case cases[] = {
      {"plain, 0 B shared", &Empty, sms, 0, false, false},
      {"plain, 200 KiB shared", &EmptyWithShared, sms, big, false, false},
      {"cooperative, 0 B shared", &Empty, sms, 0, true, false},
      {"cooperative, 200 KiB shared", &EmptyWithShared, sms, big, true, false},
      {"cooperative, 200 KiB shared, grid sync", &GridSync, sms, big, true, false},
      {"1-block plain + plain 200 KiB (pair)", &EmptyWithShared, sms, big, false, true},
      {"1-block plain + cooperative 200 KiB (pair)", &EmptyWithShared, sms, big, true,
       true},
      {"1-block plain + cooperative 200 KiB + grid sync (pair)", &GridSync, sms, big,
       true, true},
  };
  std::printf("device %d: %d SMs, %d B opt-in shared memory per block; grid %d x %d\n",
              device, sms, optin, sms, kThreads);
  for (const Case& c : cases) {
    std::printf("%8.2f us per launch  %s\n", MicrosecondsPerLaunch(c, sink, stream),
                c.name);
  }
  Check(cudaStreamDestroy(stream), "stream");
  Check(cudaFree(sink), "free");
  return 0;
}
