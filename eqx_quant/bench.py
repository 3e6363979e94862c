"""Benchmark of eqx_quant's FP8 quantize kernels against hand-written jnp versions.

Usage::

    python -m eqx_quant.bench [--sizes 1024 4096 8192 16384x4096] [--reps 7] [--json out.json]

For every shape (bf16, 2-D, flatten_axis=-1) and op it times our op (`jax.jit` of
`eqx_quant.quantize` / `quantize_dbias` with `impl="ffi"`, i.e. the CUDA kernel on a GPU and
the CPU kernel on a CPU) and a hand-written jnp version of the same op, jitted by XLA, in the
same run, and measures the device-to-device copy bandwidth of this run. The ops:

- `delayed_row`: FP8 delayed scaling (scale given), rowwise cast + amax;
- `delayed_rowcol`: the same plus the transposed copy;
- `current_row`: FP8 current scaling (amax, scale = 448/amax, cast);
- `current_rowcol`: the same plus the transposed copy;
- `dbias_current_row`: dbias (sum over rows, cast to bf16) + current scaling, rowwise;
- `dbias_current_rowcol`: the same plus the transposed copy;
- `mxfp8_row`: MXFP8 (e4m3, 1x32 blocks, E8M0 scales), rowwise;
- `mxfp8_rowcol`: the same plus the colwise (32x1 blocks, not transposed) copy, in one op.

Timing (no CUDA events are reachable from Python here): one jitted function applies the op
to K distinct input buffers (K >= 3 and K x input >= 192 MB, so the 60 MiB L2 of an H200
cannot serve the inputs), and is dispatched back to back many times; the time per op is the
wall clock of a batch / (dispatches x K), after a `block_until_ready`, and the reported
figure is the median over `--reps` batches. Per-dispatch host cost is divided by K and
hidden behind device work where the op takes longer than its dispatch; at 1024^2 the
numbers can still be host bound (JAX dispatch is tens of microseconds).

Copy bandwidth: a jitted reversal `a[::-1]` of a 1 GiB (GPU; 64 MiB on CPU) uint32 array,
which XLA cannot elide or alias: it reads and writes every byte once, coalesced.
GB/s counts each input read once and each output written once (x, the FP8 data, the
transposed copy, the bf16 dbias, the MXFP8 scale bytes; a few scalars ignored); % is of the
copy bandwidth. The hand-written MXFP8 version is plain jnp (block amax by reshape + max,
the E8M0 exponent by bit operations, a multiply and a clipped cast); it skips the exact
NaN / subnormal rules of the op, which only makes it cheaper.
"""

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp


OPS = (
    "delayed_row",
    "delayed_rowcol",
    "current_row",
    "current_rowcol",
    "dbias_current_row",
    "dbias_current_rowcol",
    "mxfp8_row",
    "mxfp8_rowcol",
)
DEFAULT_SIZES = ("1024", "4096", "8192", "16384x4096")
FP8_MAX = 448.0
L2_DEFEAT_BYTES = 192 * 10**6


def _parse_size(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    if len(parts) == 1:
        return int(parts[0]), int(parts[0])
    if len(parts) == 2:
        return int(parts[0]), int(parts[1])
    raise argparse.ArgumentTypeError(f"size must be N or MxN, got {text!r}")


# ---- the ops: ours -------------------------------------------------------------------------


def _ours(op: str) -> Callable:
    import eqx_quant as eqq

    layout = (
        eqq.QuantizeLayout.ROWWISE_COLWISE if op.endswith("rowcol") else eqq.QuantizeLayout.ROWWISE
    )
    if op.startswith("mxfp8"):
        block_quantizer = eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, layout)
        return lambda x, scale: eqq.quantize(x, block_quantizer, impl="ffi")
    if op.startswith("delayed"):

        def fn(x, scale):
            q = eqq.DelayedScaleQuantizer(jnp.float8_e4m3fn, layout, scale=scale)
            return eqq.quantize(x, q, impl="ffi")

        return fn
    quantizer = eqq.CurrentScaleQuantizer(jnp.float8_e4m3fn, layout)
    if op.startswith("dbias"):
        return lambda x, scale: eqq.quantize_dbias(x, quantizer, impl="ffi")
    return lambda x, scale: eqq.quantize(x, quantizer, impl="ffi")


# ---- the ops: hand-written jnp (what a user would write without eqx_quant) ------------------


def _cast(x, scale):
    y = jnp.clip(x.astype(jnp.float32) * scale, -FP8_MAX, FP8_MAX)
    return y.astype(jnp.float8_e4m3fn)


def _mxfp8_blocks(x, axis: int):
    """(e4m3 data, E8M0 scale bytes) of a 2-D `x` with blocks of 32 along `axis` (0 or 1)."""
    m, n = x.shape
    xb = x.astype(jnp.float32)
    xb = xb.reshape(m, n // 32, 32) if axis == 1 else xb.reshape(m // 32, 32, n)
    amax = jnp.max(jnp.abs(xb), axis=axis + 1, keepdims=True)
    bits = jax.lax.bitcast_convert_type(amax * (1.0 / FP8_MAX), jnp.uint32)
    exponent = bits >> 23
    e = exponent + (((bits & 0x7FFFFF) != 0) & (exponent < 254)).astype(jnp.uint32)  # round up
    factor = jax.lax.bitcast_convert_type((254 - e) << 23, jnp.float32)  # 2^(127 - e)
    q = jnp.clip(xb * factor, -FP8_MAX, FP8_MAX).astype(jnp.float8_e4m3fn)
    return q.reshape(m, n), jnp.squeeze(e, axis + 1).astype(jnp.uint8)


def _xla(op: str) -> Callable:
    transposed = op.endswith("rowcol")
    if op.startswith("mxfp8"):

        def mxfp8(x, scale):
            del scale
            out = dict(zip(("row", "row_scale"), _mxfp8_blocks(x, 1)))
            if transposed:
                out.update(zip(("col", "col_scale"), _mxfp8_blocks(x, 0)))
            return out

        return mxfp8

    def fn(x, scale):
        out = {}
        amax = jnp.max(jnp.abs(x)).astype(jnp.float32)
        if op.startswith("delayed"):
            s = scale[0]
            out["amax"] = amax
        else:
            s = FP8_MAX / amax
        y = _cast(x, s)
        out["row"] = y
        out["scale_inv"] = 1.0 / s
        if transposed:
            out["col"] = y.T
        if op.startswith("dbias"):
            out["dbias"] = x.astype(jnp.float32).sum(0).astype(x.dtype)
        return out

    return fn


def _bytes_moved(op: str, m: int, n: int, itemsize: int) -> int:
    total = m * n * itemsize + m * n  # x read, FP8 row written
    if op.startswith("mxfp8"):
        total += m * n // 32  # E8M0 row scales
    if op.endswith("rowcol"):
        total += m * n  # transposed (FP8) or colwise (MXFP8) copy
        if op.startswith("mxfp8"):
            total += m * n // 32
    if op.startswith("dbias"):
        total += n * itemsize
    return total


# ---- timing ---------------------------------------------------------------------------------


def _batched(fn: Callable, count: int) -> Callable:
    """One jitted function applying `fn` to `count` distinct inputs (no CSE possible)."""

    def run(xs, scale):
        return [fn(x, scale) for x in xs]

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


def copy_bandwidth(reps: int) -> tuple[float, int]:
    """(bytes per second, bytes) of a jitted reversal of a large uint32 array."""
    on_gpu = jax.default_backend() != "cpu"
    count = (1 << 28) if on_gpu else (1 << 24)
    a = jnp.arange(count, dtype=jnp.uint32)
    rev = jax.jit(lambda a: a[::-1])
    seconds = _time_per_call(rev, (a,), 1, reps)
    moved = 2 * count * 4
    return moved / seconds, moved


def _inputs(m: int, n: int, seed: int) -> list:
    count = 3
    if jax.default_backend() != "cpu":  # a CPU run only checks that the benchmark works
        count = max(3, -(-L2_DEFEAT_BYTES // (m * n * 2)))
    key = jax.random.PRNGKey(seed)
    xs = []
    for i in range(count):
        x = jax.random.normal(jax.random.fold_in(key, i), (m, n), jnp.float32) * 3.0
        xs.append(x.astype(jnp.bfloat16))
    return xs


def run_benchmark(sizes, reps: int, ops=OPS, log=print) -> dict:
    import eqx_quant as eqq

    device = jax.devices()[0]
    bandwidth, copy_bytes = copy_bandwidth(reps)
    log(
        f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}, "
        f"eqx_quant kernels: {eqq.library_paths()}"
    )
    log(f"copy bandwidth (jitted a[::-1], {copy_bytes / 2**30:.2f} GiB moved): "
        f"{bandwidth / 1e9:.0f} GB/s")
    rows = []
    header = (
        f"{'op':<22} {'shape':>11} {'ours us':>9} {'GB/s':>7} {'%copy':>6} "
        f"{'XLA us':>9} {'GB/s':>7} {'%copy':>6} {'speedup':>7}"
    )
    log(header)
    log("-" * len(header))
    for m, n in sizes:
        xs = _inputs(m, n, seed=m * 31 + n)
        scale = jnp.asarray([FP8_MAX / 12.0], jnp.float32)
        for op in ops:
            if op.startswith("mxfp8") and (m % 32 or n % 32):
                log(f"{op:<22} {f'{m}x{n}':>11} skipped: MXFP8 needs multiples of 32")
                continue
            moved = _bytes_moved(op, m, n, 2)
            ours = _time_per_call(_batched(_ours(op), len(xs)), (xs, scale), len(xs), reps)
            xla = _time_per_call(_batched(_xla(op), len(xs)), (xs, scale), len(xs), reps)
            row = dict(
                op=op,
                shape=[m, n],
                dtype="bfloat16",
                inputs_rotated=len(xs),
                bytes=moved,
                ours_us=ours * 1e6,
                ours_gbps=moved / ours / 1e9,
                ours_pct_copy=100.0 * moved / ours / bandwidth,
                xla_us=xla * 1e6,
                xla_gbps=moved / xla / 1e9,
                xla_pct_copy=100.0 * moved / xla / bandwidth,
                speedup=xla / ours,
            )
            rows.append(row)
            log(
                f"{op:<22} {f'{m}x{n}':>11} {row['ours_us']:9.1f} {row['ours_gbps']:7.0f} "
                f"{row['ours_pct_copy']:6.1f} {row['xla_us']:9.1f} {row['xla_gbps']:7.0f} "
                f"{row['xla_pct_copy']:6.1f} {row['speedup']:7.2f}"
            )
    return dict(
        device=str(device.device_kind),
        backend=jax.default_backend(),
        jax=jax.__version__,
        copy_gbps=bandwidth / 1e9,
        copy_method="jax.jit(lambda a: a[::-1]) on a uint32 array",
        timing=(
            "median over reps of (wall clock of back-to-back dispatches / ops), one dispatch "
            "= the op on K distinct inputs (K >= 3, K x input >= 192 MB)"
        ),
        rows=rows,
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eqx_quant.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=list(DEFAULT_SIZES), type=str,
                        help="N (for NxN) or MxN, bf16 (default: %(default)s)")
    parser.add_argument("--reps", type=int, default=7, help="batches per measurement (median)")
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    sizes = [_parse_size(s) for s in args.sizes]
    result = run_benchmark(sizes, max(1, args.reps), tuple(args.ops))
    result["command"] = " ".join(["python -m eqx_quant.bench"] + list(sys.argv[1:] if argv is None else argv))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
