// The preamble of every FFI handler, CPU and CUDA alike, written once: each
// op family's args.h declares Prepare<Op>(operands..., attrs), which checks
// the operands against the op's contract (its args.cc) and then fills the
// kernel's buffer pointers (null for an output that is absent, a (0,)
// buffer), returning one PreparedCall. A handler is then its preamble and its
// kernel: RunCpuKernel, with the ParallelFor over XLA's intra-op thread pool
// (ffi/cpu_thread_pool.h), or EnqueueCudaKernel with the family's launcher on
// XLA's stream.

#ifndef EQX_QUANT_CSRC_FFI_HANDLER_PREAMBLE_H_
#define EQX_QUANT_CSRC_FFI_HANDLER_PREAMBLE_H_

#include "common/parallel_for.h"
#include "common/scoped_ieee_float_env.h"
#include "xla/ffi/api/ffi.h"

namespace eqx_quant {

// One validated call: the XLA-free problem and the kernel's buffers.
template <typename Problem, typename Buffers>
struct PreparedCall {
  Problem problem;
  Buffers buffers;
};

template <typename Problem, typename Buffers>
using PreparedCallOr = xla::ffi::ErrorOr<PreparedCall<Problem, Buffers>>;

// A buffer's data as T*; DataIf: null unless `present`.
template <typename T>
T* Data(const xla::ffi::AnyBuffer& buffer) {
  return static_cast<T*>(buffer.untyped_data());
}

template <typename T>
T* DataIf(bool present, const xla::ffi::AnyBuffer& buffer) {
  return present ? Data<T>(buffer) : nullptr;
}

// A CPU handler's body: the preamble's error, or kernel(problem, buffers,
// parallel). XLA's CPU runtime runs with flush-to-zero; the ops are specified
// with IEEE subnormals (the kernels live in other translation units, so no
// float operation can be moved across this switch; `parallel`'s helper
// threads switch themselves).
template <typename Call, typename Kernel>
xla::ffi::Error RunCpuKernel(const xla::ffi::ErrorOr<Call>& call,
                             const ParallelFor& parallel, Kernel kernel) {
  if (!call.has_value()) return call.error();
  ScopedIeeeFloatEnv ieee_float_env;
  kernel(call->problem, call->buffers, parallel);
  return xla::ffi::Error::Success();
}

// RunCpuKernel for a kernel that takes its problem (with its buffers in it)
// and the ParallelFor: kernel(problem, parallel).
template <typename Problem, typename Kernel>
xla::ffi::Error RunCpuProblem(const xla::ffi::ErrorOr<Problem>& problem,
                              const ParallelFor& parallel, Kernel kernel) {
  if (!problem.has_value()) return problem.error();
  ScopedIeeeFloatEnv ieee_float_env;
  kernel(*problem, parallel);
  return xla::ffi::Error::Success();
}

// A CUDA handler's body: the preamble's error, or launch(problem, buffers,
// stream) with its launch status turned into the handler's error by
// `to_error` (the family's handlers_cuda.cc says which error code a failure
// that is not a CUDA error gets).
template <typename Call, typename Launch, typename Stream, typename ToError>
xla::ffi::Error EnqueueCudaKernel(const xla::ffi::ErrorOr<Call>& call,
                                  Launch launch, Stream stream,
                                  ToError to_error) {
  if (!call.has_value()) return call.error();
  return to_error(launch(call->problem, call->buffers, stream));
}

}  // namespace eqx_quant

#endif  // EQX_QUANT_CSRC_FFI_HANDLER_PREAMBLE_H_
