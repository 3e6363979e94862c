"""The timing of `python -m eqx_quant.bench` (see its docstring for the method): CUDA events
recorded on XLA's stream around each op and around back-to-back runs of it, through the tiny
FFI targets of `_kernels_cuda.so` (csrc/ffi/bench_events_cuda.cu); the host wall clock where
those cannot run (CPU, or no CUDA kernels built)."""

import ctypes
import functools
import importlib.util
import os
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

# ---- timing: host wall clock (the fallback) -------------------------------------------------


def _batched(fn: Callable, count: int) -> Callable:
    """One jitted function applying `fn` to `count` distinct inputs (no CSE possible)."""

    def run(xs, *shared):
        return [fn(x, *shared) for x in xs]

    return jax.jit(run)


def _time_per_call(run: Callable, args: tuple, calls_per_dispatch: int, reps: int) -> float:
    """Median seconds per op over `reps` batches of back-to-back dispatches."""
    jax.block_until_ready(run(*args))  # compile + warm up
    start = time.perf_counter()
    jax.block_until_ready(run(*args))
    once = max(time.perf_counter() - start, 1e-6)
    dispatches = max(2, min(1000, int(0.05 / once)))
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        out = None
        for _ in range(dispatches):
            out = run(*args)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - start) / (dispatches * calls_per_dispatch))
    return statistics.median(samples)


# ---- timing: CUDA events (device time) ------------------------------------------------------

EVENT_TARGET = "eqx_quant_bench_event_cuda"
DELAY_TARGET = "eqx_quant_bench_delay_cuda"
EVENT_SYMBOLS = (
    "BenchEventCuda", "BenchDelayCuda", "EqxqBenchElapsedMs", "EqxqBenchReset", "EqxqBenchSlots"
)
EVENT_OPS_PER_CALL = 32  # ops bracketed by events in one jitted function (unrolled)
EVENT_OUTPUT_BUDGET = 4 << 30  # bytes of op outputs one call may keep alive
DELAY_NS_PER_OP = 100_000  # head start given to the GPU per op enqueued by the host
MAX_DELAY_NS = 20_000_000
# EqxqBenchElapsedMs codes besides the cudaError_t values (csrc/ffi/bench_events_cuda.cu).
_ELAPSED_ERRORS = {
    -1: "slot out of range",
    -2: "event not recorded by this run (XLA dropped or never ran it)",
    -3: "events recorded on different devices",
}


class CudaEvents:
    """The CUDA-event pool of `_kernels_cuda.so`: FFI targets to record, ctypes to read."""

    def __init__(self, library: ctypes.CDLL, path: str):
        self.path = path
        self._elapsed = library.EqxqBenchElapsedMs
        self._elapsed.argtypes = (ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_float))
        self._elapsed.restype = ctypes.c_int
        self._reset = library.EqxqBenchReset
        self._reset.argtypes = ()
        self._reset.restype = ctypes.c_int
        slots = library.EqxqBenchSlots
        slots.argtypes = ()
        slots.restype = ctypes.c_int64
        self.slots = int(slots())

    @staticmethod
    def event(token, slot: int, after=()):
        """`token`, after recording event `slot` on XLA's stream (the result aliases `token`).

        The arrays `after` are operands the handler never touches: XLA must compute them,
        in their default layout, before it records the event."""
        call = jax.ffi.ffi_call(
            EVENT_TARGET, jax.ShapeDtypeStruct(token.shape, token.dtype),
            input_output_aliases={0: 0},
        )
        return call(token, *after, slot=slot)

    @staticmethod
    def delay(token, ns: int):
        """`token`, after a GPU kernel that spins for `ns` nanoseconds."""
        call = jax.ffi.ffi_call(
            DELAY_TARGET, jax.ShapeDtypeStruct(token.shape, token.dtype),
            input_output_aliases={0: 0},
        )
        return call(token, ns=ns)

    def reset(self) -> None:
        """Forget every recording (call only when no timed computation is in flight)."""
        self._reset()

    def elapsed_ms(self, a: int, b: int) -> float:
        """Milliseconds from event `a` to event `b` (waits for `b`)."""
        ms = ctypes.c_float()
        code = self._elapsed(a, b, ctypes.byref(ms))
        if code:
            why = _ELAPSED_ERRORS.get(code, f"cudaError_t {code}")
            raise RuntimeError(f"eqx_quant.bench: elapsed time of events {a} -> {b}: {why}")
        return ms.value


@functools.cache
def cuda_events() -> tuple[CudaEvents | None, str]:
    """(the CUDA-event timer, "") where it can run, else (None, why not)."""
    backend = jax.default_backend()
    if backend != "gpu":
        return None, f"{backend} backend"
    spec = importlib.util.find_spec("eqx_quant._kernels_cuda")
    path = spec.origin if spec is not None and spec.origin else None
    if path is None or not os.path.exists(path):
        return None, "eqx_quant._kernels_cuda is not built"
    try:
        library = ctypes.CDLL(path)
    except OSError as error:
        return None, f"cannot load {path}: {error}"
    missing = [name for name in EVENT_SYMBOLS if not hasattr(library, name)]
    if missing:
        return None, f"{path} lacks {', '.join(missing)} (built before the event timer)"
    try:
        for target, symbol in ((EVENT_TARGET, "BenchEventCuda"), (DELAY_TARGET, "BenchDelayCuda")):
            jax.ffi.register_ffi_target(
                target, jax.ffi.pycapsule(getattr(library, symbol)), platform="CUDA"
            )
        events = CudaEvents(library, path)
        # Probe, through the same path as the measurements: two events around a 100 us spin
        # must be recorded in stream order, around it.
        probe = jax.jit(lambda t: events.event(events.delay(events.event(t, 0), 100_000), 1))
        events.reset()
        jax.block_until_ready(probe(jnp.zeros((1,), jnp.uint32)))
        probe_ms = events.elapsed_ms(0, 1)
        if not 0.09 <= probe_ms < 1000.0:
            return None, f"CUDA-event probe: {probe_ms} ms around a 0.1 ms spin"
    except Exception as error:  # noqa: BLE001 -- any failure means: use the wall clock
        return None, f"CUDA-event probe failed: {type(error).__name__}: {error}"
    return events, ""


def _output_bytes(fn: Callable, x, shared: tuple) -> int:
    out = jax.eval_shape(fn, x, *shared)
    return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree_util.tree_leaves(out))


def _bracketed(fn: Callable, count: int, ops: int, event: Callable, delay: Callable | None,
               delay_ns: int) -> Callable:
    """jit of `run(xs, shared, token)`: op r = `fn(xs[r % count], *shared)`, r < `ops`,
    between events 2r and 2r+1, all ordered through `token` by data dependence."""
    barrier = jax.lax.optimization_barrier

    def run(xs, shared, token):
        if delay is not None and delay_ns > 0:
            token = delay(token, delay_ns)
        kept = []
        for r in range(ops):
            token = event(token, 2 * r)
            # The op's inputs (whole jit arguments: nothing to slice) become available only
            # after event 2r ...
            x, shared_r, token = barrier((xs[r % count], shared, token))
            leaves = jax.tree_util.tree_leaves(fn(x, *shared_r))
            kept.extend(leaves)
            # ... and event 2r+1 takes every output of the op as an operand: XLA finishes
            # them, in the default layout a caller gets (a layout change, e.g. the physical
            # transpose of `y.T`, cannot slip out of the bracket), before recording it. The
            # last event takes the outputs of all ops: no op is dead, every output keeps its
            # own buffer until the end (as outputs a caller keeps would), and as only the
            # token is returned, XLA adds no output copy (of duplicate or constant leaves)
            # that could land in a bracket.
            token = event(token, 2 * r + 1, after=kept if r == ops - 1 else leaves)
        return token

    return jax.jit(run)


def _back_to_back(fn: Callable, count: int, ops: int, event: Callable, delay: Callable | None,
                  delay_ns: int) -> Callable:
    """jit of `run(xs, shared, token)`: the same `ops` ops as `_bracketed`, back to back
    between events 0 and 1 only. Op r+1's inputs pass an optimization barrier together with
    op r's outputs, so the ops run one after another and XLA cannot fuse or overlap them."""
    barrier = jax.lax.optimization_barrier

    def run(xs, shared, token):
        if delay is not None and delay_ns > 0:
            token = delay(token, delay_ns)
        token = event(token, 0)
        kept, previous = [], []
        for r in range(ops):
            x, shared_r, token, _ = barrier((xs[r % count], shared, token, previous))
            previous = jax.tree_util.tree_leaves(fn(x, *shared_r))
            kept.extend(previous)
        return event(token, 1, after=kept)

    return jax.jit(run)


def time_events(events: CudaEvents, fn: Callable, xs: list, shared: tuple, reps: int) -> dict:
    """Median device seconds of `fn` between CUDA events, over `reps` timed calls: one
    bracket per op ("seconds") and per op of `ops` back-to-back ops ("b2b_seconds")."""
    per_op = max(1, _output_bytes(fn, xs[0], shared))
    ops = max(2, min(EVENT_OPS_PER_CALL, EVENT_OUTPUT_BUDGET // per_op, events.slots // 2))
    delay_ns = min(MAX_DELAY_NS, ops * DELAY_NS_PER_OP)
    run = _bracketed(fn, len(xs), ops, events.event, events.delay, delay_ns)
    streamed = _back_to_back(fn, len(xs), ops, events.event, events.delay, delay_ns)
    token = jnp.zeros((1,), jnp.uint32)
    samples, gaps, b2b = [], [], []
    for call in range(reps + 1):  # call 0 compiles and warms up: not counted
        # Op r of this call reads buffer (call x ops + r) % K: the rotation goes on across
        # calls (the same jitted function, its arguments permuted).
        start = call * ops % len(xs)
        rotated = xs[start:] + xs[:start]
        events.reset()
        jax.block_until_ready(streamed(rotated, shared, token))
        if call > 0:
            b2b.append(events.elapsed_ms(0, 1) * 1e-3 / ops)
        events.reset()
        jax.block_until_ready(run(rotated, shared, token))
        if call == 0:
            continue
        for r in range(ops):
            ms = events.elapsed_ms(2 * r, 2 * r + 1)
            gap = events.elapsed_ms(2 * r + 1, 2 * r + 2) if r + 1 < ops else 0.0
            if ms < 0 or gap < 0:
                raise RuntimeError(
                    f"eqx_quant.bench: CUDA events out of order around op {r} "
                    f"({ms} ms, gap {gap} ms): XLA reordered the bracket"
                )
            samples.append(ms * 1e-3)
            gaps.append(gap * 1e-3)
    return dict(seconds=statistics.median(samples), samples=len(samples),
                ops_per_call=ops, max_gap_us=max(gaps) * 1e6,
                b2b_seconds=statistics.median(b2b))


def measure(fn: Callable, xs: list, shared: tuple, reps: int) -> dict:
    """{"seconds": median per op, "samples", "max_gap_us" and "b2b_seconds" (CUDA events
    only, else None)}."""
    events, _ = cuda_events()
    if events is not None:
        return time_events(events, fn, xs, shared, reps)
    seconds = _time_per_call(_batched(fn, len(xs)), (xs, *shared), len(xs), reps)
    return dict(seconds=seconds, samples=reps, max_gap_us=None, b2b_seconds=None)


def micro(seconds: float | None) -> float | None:
    """Seconds in microseconds; None stays None (no b2b figure without CUDA events)."""
    return None if seconds is None else seconds * 1e6


def timing_method() -> tuple[str, str]:
    """("cuda_events" or "wall_clock", a description for the header and --json)."""
    events, why_not = cuda_events()
    if events is not None:
        return "cuda_events", (
            f"device time between CUDA events around each op (median over brackets; up to "
            f"{EVENT_OPS_PER_CALL} ops per jitted call, inputs rotated over K >= 3 buffers, "
            f"K x input >= 192 MB), events of {events.path}"
        )
    return "wall_clock", (
        f"host wall clock ({why_not}): median over reps of (wall clock of back-to-back "
        "dispatches / ops), one dispatch = the op on K distinct inputs (K >= 3; on a GPU "
        "K x input >= 192 MB)"
    )
