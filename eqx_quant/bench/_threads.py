"""The thread count of a CPU run: the size of XLA's intra-op thread pool, which the CPU kernels
split their work over, read through a tiny FFI target of `_kernels_cpu.so`
(the `CpuThreads` handler, `csrc/ffi/cpu_threads.cc`, registered here)."""

import ctypes
import functools
import os

import jax
import jax.numpy as jnp

THREADS_TARGET = "eqx_quant_bench_cpu_threads"


@functools.cache
def cpu_threads() -> tuple[int | None, str]:
    """(XLA's CPU intra-op pool size, how it was found), or (None, why not)."""
    import eqx_quant as eqq

    path = eqq.library_paths().get("cpu")
    if path is None or not os.path.exists(path):
        return None, "eqx_quant's CPU kernels are not built"
    try:
        library = ctypes.CDLL(path)
    except OSError as error:
        return None, f"cannot load {path}: {error}"
    if not hasattr(library, "CpuThreads"):
        return None, f"{path} lacks CpuThreads (built before the thread-count target)"
    try:
        jax.ffi.register_ffi_target(
            THREADS_TARGET, jax.ffi.pycapsule(library.CpuThreads), platform="cpu"
        )
        call = jax.ffi.ffi_call(THREADS_TARGET, jax.ShapeDtypeStruct((1,), jnp.int32))
        cpu = jax.devices("cpu")[0]
        with jax.default_device(cpu):
            threads = int(jax.jit(call)()[0])
    except Exception as error:  # noqa: BLE001 -- a report, never a failure
        return None, f"thread-count probe failed: {type(error).__name__}: {error}"
    return threads, "XLA's CPU intra-op thread pool, from the FFI thread-pool context"


def threads_line() -> str:
    """One header line: the CPU kernels' thread count and the machine's cores."""
    threads, how = cpu_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    shown = "unknown" if threads is None else str(threads)
    return f"cpu threads: {shown} ({how}); cores available to this process: {cores}"
