"""Benchmark of eqx_quant's FP8 quantize kernels against hand-written jnp versions.

Usage::

    python -m eqx_quant.bench [--sizes 1024 4096 8192 16384x4096] [--reps 7] [--json out.json]
    python -m eqx_quant.bench --gemms [--gemm-sizes 4096 8192 16384x4096x4096] [--reps 7]

The second form times eqx_quant's GEMMs and layers (`gemm`, `dense`, `grouped_gemm`) against
the same products in bf16, in TFLOP/s (eqx_quant/_bench_gemm.py says what each row times).

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
- `mxfp8_dbias_row`: `mxfp8_row` plus dbias (sum over rows, cast to bf16): `quantize_dbias`
  with MXFP8 (one op: on the GPU the rowwise blocks are written in the dbias' one read of x);
- `mxfp8_dbias_rowcol`: `mxfp8_rowcol` plus dbias (the MXFP8 kernel, then the dbias sums: two
  reads of x);
- `nvfp4_row`: NVFP4 1D rowwise (global amax pass + E4M3 block scales + E2M1 cast);
- `nvfp4_rht_rowcol`: NVFP4 rowwise plus the RHT'd, transposed colwise copy (two amaxes);
- `nvfp4_sr_row`: NVFP4 1D rowwise with stochastic rounding (counter-based Threefry bits);
- `nvfp4_rht_sr_rowcol`: `nvfp4_rht_rowcol` with stochastic rounding in both copies (how
  NVFP4 training recipes quantize gradients).
- `nvfp4_2d_rowcol`: NVFP4 with one scale per 16x16 tile (how NVFP4 recipes quantize
  weights), rowwise plus the transposed colwise copy (the exact transpose of the rowwise codes).
- `grouped_mxfp8_row`, `grouped_mxfp8_rowcol`, `grouped_nvfp4_row`, `grouped_nvfp4_rowcol`,
  `grouped_nvfp4_sr_row`, `grouped_nvfp4_sr_rowcol`, `grouped_dbias`: the M rows in 8 ragged
  groups (`eqx_quant/_bench_grouped.py`), per-group swizzled scales, blocks aligned to each
  group's start (NVFP4: one amax per group; `_sr_`: stochastic rounding, a key per group).

Timing, on a GPU (CUDA events, device time): `_kernels_cuda.so` also holds tiny FFI targets
(csrc/ffi/bench_events_cuda.cu): `eqx_quant_bench_event_cuda` records a CUDA event of a fixed
pool on XLA's stream, and ctypes entry points read the elapsed time between two events;
eqx_quant/_bench_timing.py registers them itself. One jitted function times R ops (R <= 32,
fewer when R outputs would pass 4 GiB), unrolled: op r of call c consumes input buffer
(c x R + r) % K, K >= 3 distinct buffers passed in as jit arguments whose total exceeds
192 MB, so the 60 MiB L2 of an H200 cannot serve the inputs (and no slicing happens inside
the function). Op r lies between events 2r and 2r+1, ordered by data dependence alone. A
one-element token runs through every event (each event passes it through, aliased: no
copy). The op's inputs go through `lax.optimization_barrier` together with the token, so the
op starts after event 2r.
Event 2r+1 takes the token and every output of the op as operands (never read), so it follows
all of the op's kernels, and the outputs are made in the default layout a caller gets (a
layout change such as the physical transpose of `y.T` cannot slip out of the bracket); event
2r+2 takes the token of event 2r+1. The last event takes the outputs of all R ops: none is
dead, each keeps its own buffer, and as only the token is returned XLA adds no output copy
that could land in a bracket. So a bracket holds exactly one op's kernels. A spin kernel
(`eqx_quant_bench_delay_cuda`, R x 100 us, at most 20 ms) before the first event keeps the
GPU busy while the host enqueues the R ops, so the GPU does not wait for the host inside a
bracket. After `block_until_ready` the R times are read; the first call (compile, warm-up)
is dropped, `--reps` calls follow, and the figure is the median of all their brackets. The
largest gap between an op's end event and the next op's start event is reported too (~0
when the GPU never idled between ops); events out of order or not recorded are an error.
Back to back ("b2b" columns, `*_b2b_us` in --json): the same R ops in one jitted function with
only two events, before the first and after the last (which takes every output), op r+1's
inputs passed through an optimization barrier together with op r's outputs (so XLA neither
fuses nor overlaps them); the figure is the median over the calls of (time / R). This is how
TE's anchors were measured (back-to-back calls in a CUDA graph replay, docs perf_anchors); the
bracket of one op adds the cost of its two event records (~1-3 us).

Fallback (CPU, or no `_kernels_cuda.so` / an old one without the event target): host wall
clock. One jitted function applies the op to the K distinct buffers and is dispatched back to
back many times; the time per op is the wall clock of a batch / (dispatches x K), after a
`block_until_ready`, and the figure is the median over `--reps` batches. Per-dispatch host
cost is divided by K and hidden behind device work where the op takes longer than its
dispatch; small shapes can still be host bound (JAX dispatch is tens of microseconds). The
header and the "timing" field of --json say which method was used ("cuda_events" or
"wall_clock", and why in "timing_detail").

Copy bandwidth: a jitted reversal `a[::-1]` of a 1 GiB (GPU; 64 MiB on CPU) uint32 array,
which XLA cannot elide or alias: it reads and writes every byte once, coalesced; timed the same
way as the ops.
GB/s counts each input read once and each output written once (x, the FP8 data, the
transposed copy, the bf16 dbias, the MXFP8 scale bytes; a few scalars ignored); % is of the
copy bandwidth. The hand-written MXFP8 version is plain jnp (block amax by reshape + max,
the E8M0 exponent by bit operations, a multiply and a clipped cast); it skips the exact
NaN / subnormal rules of the op, which only makes it cheaper.
"""

import argparse
import json
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp

from . import _bench_grouped
from ._bench_gemm import DEFAULT_GEMM_SIZES, GEMM_OPS, parse_gemm_size, run_gemm_benchmark
from ._bench_timing import EVENT_OPS_PER_CALL, measure, micro, timing_method

OPS = (
    "delayed_row",
    "delayed_rowcol",
    "current_row",
    "current_rowcol",
    "dbias_current_row",
    "dbias_current_rowcol",
    "mxfp8_row",
    "mxfp8_rowcol",
    "mxfp8_dbias_row",
    "mxfp8_dbias_rowcol",
    "nvfp4_row",
    "nvfp4_rht_rowcol",
    "nvfp4_sr_row",
    "nvfp4_rht_sr_rowcol",
    "nvfp4_2d_rowcol",
) + _bench_grouped.OPS
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
        if "dbias" in op:
            return lambda x, scale: eqq.quantize_dbias(x, block_quantizer, impl="ffi")
        return lambda x, scale: eqq.quantize(x, block_quantizer, impl="ffi")
    if op.startswith("nvfp4"):
        nv = eqq.NVFP4Quantizer(
            q_layout=layout,
            use_2d="_2d_" in op,
            use_rht="rht" in op,
            stochastic_rounding="_sr_" in op,
        )
        key = jax.random.key(0) if nv.stochastic_rounding else None
        return lambda x, scale: eqq.quantize(x, nv, key=key, impl="ffi")
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


def _nvfp4_rows(x):
    """(E2M1 data, E4M3 scales) of a 2-D `x`, 1x16 blocks, TE's formulas in plain jnp."""
    m, n = x.shape
    xb = x.astype(jnp.float32).reshape(m, n // 16, 16)
    s_enc = 2688.0 / jnp.max(jnp.abs(xb))
    sdb = (jnp.max(jnp.abs(xb), axis=-1, keepdims=True) * (s_enc / 6.0)).astype(jnp.float8_e4m3fn)
    enc = 1.0 / (sdb.astype(jnp.float32) / s_enc)
    q = jnp.clip(xb * enc, -6.0, 6.0).astype(jnp.float4_e2m1fn)
    return q.reshape(m, n), jnp.squeeze(sdb, -1)


def _nvfp4_tiles(x):
    """(E2M1 data, E4M3 scales per row) of a 2-D `x`, 16x16 tiles, TE's formulas in plain jnp."""
    m, n = x.shape
    xb = x.astype(jnp.float32).reshape(m // 16, 16, n // 16, 16)
    s_enc = 2688.0 / jnp.max(jnp.abs(xb))
    tile_amax = jnp.max(jnp.abs(xb), axis=(1, 3), keepdims=True)
    sdb = (tile_amax * (s_enc / 6.0)).astype(jnp.float8_e4m3fn)
    enc = 1.0 / (sdb.astype(jnp.float32) / s_enc)
    q = jnp.clip(xb * enc, -6.0, 6.0).astype(jnp.float4_e2m1fn)
    scales = jnp.broadcast_to(sdb, (m // 16, 16, n // 16, 1)).reshape(m, n // 16)
    return q.reshape(m, n), scales


def _rht16(x):
    """The 16-point Hadamard transform along the last axis (bf16 result), as a matmul."""
    h = jnp.array([[(-1.0) ** bin(i & j).count("1") for j in range(16)] for i in range(16)])
    m, n = x.shape
    y = x.reshape(m, n // 16, 16).astype(jnp.float32) @ (h / 4.0)
    return y.reshape(m, n).astype(jnp.bfloat16)


def _xla(op: str) -> Callable:
    transposed = op.endswith("rowcol")
    if op.startswith("nvfp4"):

        def nvfp4(x, scale):
            del scale
            if "_sr_" in op:  # SR by adding uniform noise of one grid step before rounding
                noise = jax.random.uniform(jax.random.key(0), x.shape, jnp.float32, -0.25, 0.25)
                x = (x.astype(jnp.float32) + noise * jnp.abs(x.astype(jnp.float32))).astype(x.dtype)
            if "_2d_" in op:
                row, row_scale = _nvfp4_tiles(x)
                col_scale = row_scale.reshape(-1, 16, row_scale.shape[1])[:, 0].T
                col_scale = jnp.repeat(col_scale, 16, axis=0)  # (n, m / 16)
                return dict(row=row, row_scale=row_scale, col=row.T, col_scale=col_scale)
            out = dict(zip(("row", "row_scale"), _nvfp4_rows(x)))
            if transposed:
                out.update(zip(("col", "col_scale"), _nvfp4_rows(_rht16(x.T))))
            return out

        return nvfp4
    if op.startswith("mxfp8"):

        def mxfp8(x, scale):
            del scale
            out = dict(zip(("row", "row_scale"), _mxfp8_blocks(x, 1)))
            if transposed:
                out.update(zip(("col", "col_scale"), _mxfp8_blocks(x, 0)))
            if "dbias" in op:
                out["dbias"] = x.astype(jnp.float32).sum(0).astype(x.dtype)
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
    if op.startswith("nvfp4"):
        # The global amax pass and the quantize pass read x; packed E2M1 codes (two per
        # byte) and one E4M3 scale per 16 are written.
        total = 2 * m * n * itemsize + m * n // 2 + m * n // 16
        if op.endswith("rowcol"):
            total += m * n // 2 + m * n // 16  # the colwise copy
            if "rht" in op:
                total += m * n * itemsize  # the RHT amax pass
        return total
    if op.startswith("mxfp8"):
        total += m * n // 32  # E8M0 row scales
    if op.endswith("rowcol"):
        total += m * n  # transposed (FP8) or colwise (MXFP8) copy
        if op.startswith("mxfp8"):
            total += m * n // 32
    if "dbias" in op:
        total += n * itemsize
    return total


def copy_bandwidth(reps: int) -> tuple[float, int, dict]:
    """(bytes per second, bytes, measurement) of a jitted reversal of a large uint32 array."""
    on_gpu = jax.default_backend() != "cpu"
    count = (1 << 28) if on_gpu else (1 << 24)
    a = jnp.arange(count, dtype=jnp.uint32)
    measured = measure(lambda a: a[::-1], [a], (), reps)
    moved = 2 * count * 4
    return moved / measured["seconds"], moved, measured


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


def _cell(us: float | None) -> str:
    return f"{'-':>6}" if us is None else f"{us:6.1f}"


def run_benchmark(sizes, reps: int, ops=OPS, log=print, on_row=None) -> dict:
    """The result dict (`rows` and the run's device, copy bandwidth and timing method);
    `on_row`, if given, is called with the result so far after every row."""
    import eqx_quant as eqq

    device = jax.devices()[0]
    timing, timing_detail = timing_method()
    bandwidth, copy_bytes, copy_measured = copy_bandwidth(reps)
    log(
        f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}, "
        f"eqx_quant kernels: {eqq.library_paths()}"
    )
    log(f"timing: {timing}: {timing_detail}")
    log(f"copy bandwidth (jitted a[::-1], {copy_bytes / 2**30:.2f} GiB moved): "
        f"{bandwidth / 1e9:.0f} GB/s")
    rows = []
    result = dict(
        device=str(device.device_kind),
        backend=jax.default_backend(),
        jax=jax.__version__,
        copy_gbps=bandwidth / 1e9,
        copy_method="jax.jit(lambda a: a[::-1]) on a uint32 array",
        copy_samples=copy_measured["samples"],
        copy_max_gap_us=copy_measured["max_gap_us"],
        timing=timing,
        timing_detail=timing_detail,
        rows=rows,
    )
    header = (
        f"{'op':<22} {'shape':>11} {'ours us':>9} {'b2b':>6} {'GB/s':>7} {'%copy':>6} "
        f"{'XLA us':>9} {'b2b':>6} {'GB/s':>7} {'%copy':>6} {'speedup':>7}"
    )
    log(header)
    log("-" * len(header))
    for m, n in sizes:
        xs = _inputs(m, n, seed=m * 31 + n)
        scale = jnp.asarray([FP8_MAX / 12.0], jnp.float32)
        for op in ops:
            if "mxfp8" in op and (m % 32 or n % 32):
                log(f"{op:<22} {f'{m}x{n}':>11} skipped: MXFP8 needs multiples of 32")
                continue
            if op.startswith("grouped"):
                moved = _bench_grouped.bytes_moved(op, m, n, 2)
                ours_fn, xla_fn = _bench_grouped.ours(op, m), _bench_grouped.xla(op, m, n)
            else:
                moved = _bytes_moved(op, m, n, 2)
                ours_fn, xla_fn = _ours(op), _xla(op)
            ours_measured = measure(ours_fn, xs, (scale,), reps)
            xla_measured = measure(xla_fn, xs, (scale,), reps)
            ours, xla = ours_measured["seconds"], xla_measured["seconds"]
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
                ours_samples=ours_measured["samples"],
                xla_samples=xla_measured["samples"],
                ours_max_gap_us=ours_measured["max_gap_us"],
                xla_max_gap_us=xla_measured["max_gap_us"],
                ours_b2b_us=micro(ours_measured["b2b_seconds"]),
                xla_b2b_us=micro(xla_measured["b2b_seconds"]),
            )
            rows.append(row)
            log(
                f"{op:<22} {f'{m}x{n}':>11} {row['ours_us']:9.1f} {_cell(row['ours_b2b_us'])} "
                f"{row['ours_gbps']:7.0f} {row['ours_pct_copy']:6.1f} {row['xla_us']:9.1f} "
                f"{_cell(row['xla_b2b_us'])} {row['xla_gbps']:7.0f} {row['xla_pct_copy']:6.1f} "
                f"{row['speedup']:7.2f}"
            )
            if on_row is not None:
                on_row(result)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eqx_quant.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=list(DEFAULT_SIZES), type=str,
                        help="N (for NxN) or MxN, bf16 (default: %(default)s)")
    parser.add_argument("--reps", type=int, default=7,
                        help="timed calls per measurement: CUDA events, each call brackets up "
                        f"to {EVENT_OPS_PER_CALL} ops; wall clock, each call is a batch of "
                        "dispatches (the median is reported)")
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    parser.add_argument("--gemms", action="store_true",
                        help="time eqx_quant's GEMMs and layers against bf16 XLA instead "
                        "(eqx_quant/_bench_gemm.py)")
    parser.add_argument("--gemm-sizes", nargs="+", default=list(DEFAULT_GEMM_SIZES), type=str,
                        help="with --gemms: N (M = K = N) or MxKxN (default: %(default)s)")
    parser.add_argument("--gemm-ops", nargs="+", default=list(GEMM_OPS), choices=GEMM_OPS)
    parser.add_argument("--json", help="write the results to this file (rewritten after every "
                        "row, with \"complete\": false until the run ends)")
    args = parser.parse_args(argv)
    sizes = [_parse_size(s) for s in args.sizes]
    command = " ".join(["python -m eqx_quant.bench"] + list(sys.argv[1:] if argv is None else argv))

    def write(result: dict, complete: bool) -> None:
        with open(args.json, "w") as f:
            json.dump(dict(result, command=command, complete=complete), f, indent=2)

    # With --json the file is rewritten after every row ("complete": false until the end), so
    # a run stopped part way (a timeout on a lent GPU) keeps the rows it measured.
    on_row = (lambda result: write(result, False)) if args.json else None
    if args.gemms:
        gemm_sizes = [parse_gemm_size(s) for s in args.gemm_sizes]
        result = run_gemm_benchmark(gemm_sizes, max(1, args.reps), tuple(args.gemm_ops),
                                    on_row=on_row)
    else:
        result = run_benchmark(sizes, max(1, args.reps), tuple(args.ops), on_row=on_row)
    if args.json:
        write(result, True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
