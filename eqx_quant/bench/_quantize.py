"""The dense and grouped quantize rows of the benchmark: ours against hand-written jnp."""

import argparse
from collections.abc import Callable

import jax
import jax.numpy as jnp

from . import _grouped
from ._threads import cpu_threads, threads_line
from ._timing import measure, micro, timing_method
from ._xla import FP8_MAX
from ._xla import xla as xla_version

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
    "fp8_block_row",
    "fp8_block_rowcol",
    "fp8_block_2d_rowcol",
    "mxfp8_dequant_row",
    "nvfp4_dequant_row",
) + _grouped.OPS
# The ops whose input is a quantized rowwise part (made outside the timing) instead of x.
DEQUANTIZE_OPS = ("mxfp8_dequant_row", "nvfp4_dequant_row")
DEFAULT_SIZES = ("1024", "4096", "8192", "16384x4096")
L2_DEFEAT_BYTES = 192 * 10**6


def parse_size(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    if len(parts) == 1:
        return int(parts[0]), int(parts[0])
    if len(parts) == 2:
        return int(parts[0]), int(parts[1])
    raise argparse.ArgumentTypeError(f"size must be N or MxN, got {text!r}")


# ---- the ops: ours -------------------------------------------------------------------------


def _ours(op: str) -> Callable:
    import eqx_quant as eqq

    if op in DEQUANTIZE_OPS:
        return lambda part, scale: part.dequantize("bfloat16")
    layout = (
        eqq.QuantizeLayout.ROWWISE_COLWISE if op.endswith("rowcol") else eqq.QuantizeLayout.ROWWISE
    )
    if op.startswith("fp8_block"):
        # "auto": the CPU kernel on a CPU; a GPU runs the reference until its kernel is on.
        fb = eqq.Float8BlockQuantizer(block="128x128" if "_2d_" in op else "1x128",
                                      q_layout=layout)
        return lambda x, scale: eqq.quantize(x, fb, impl="auto")
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


def _bytes_moved(op: str, m: int, n: int, itemsize: int) -> int:
    if op == "mxfp8_dequant_row":
        return m * n + m * n // 32 + m * n * 2  # payloads and scales read, bfloat16 written
    if op == "nvfp4_dequant_row":
        return m * n // 2 + m * n // 16 + m * n * 2
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
    if op.startswith("fp8_block"):
        per_scale = 128 * 128 if "_2d_" in op else 128
        copies = 2 if op.endswith("rowcol") else 1
        return m * n * itemsize + copies * (m * n + 4 * (m * n // per_scale))
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


def _parts(op: str, xs: list) -> list:
    """The rowwise parts a dequantize op reads, one per input."""
    import eqx_quant as eqq

    quantizer = (eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, eqq.QuantizeLayout.ROWWISE)
                 if op.startswith("mxfp8") else
                 eqq.NVFP4Quantizer(q_layout=eqq.QuantizeLayout.ROWWISE))
    quantize = jax.jit(lambda x: eqq.quantize(x, quantizer).rowwise)
    return [quantize(x) for x in xs]


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
    if jax.default_backend() == "cpu":
        log(threads_line())
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
        cpu_threads=cpu_threads()[0] if jax.default_backend() == "cpu" else None,
        rows=rows,
    )
    header = (
        f"{'op':<26} {'shape':>11} {'ours us':>9} {'b2b':>6} {'GB/s':>7} {'%copy':>6} "
        f"{'XLA us':>9} {'b2b':>6} {'GB/s':>7} {'%copy':>6} {'speedup':>7}"
    )
    log(header)
    log("-" * len(header))
    for m, n in sizes:
        xs = _inputs(m, n, seed=m * 31 + n)
        scale = jnp.asarray([FP8_MAX / 12.0], jnp.float32)
        for op in ops:
            if "mxfp8" in op and (m % 32 or n % 32):
                log(f"{op:<26} {f'{m}x{n}':>11} skipped: MXFP8 needs multiples of 32")
                continue
            if op.startswith("grouped"):
                moved = _grouped.bytes_moved(op, m, n, 2)
                ours_fn, xla_fn = _grouped.ours(op, m), _grouped.xla(op, m, n)
            else:
                moved = _bytes_moved(op, m, n, 2)
                ours_fn, xla_fn = _ours(op), xla_version(op)
            inputs = _parts(op, xs) if op in DEQUANTIZE_OPS else xs
            ours_measured = measure(ours_fn, inputs, (scale,), reps)
            xla_measured = measure(xla_fn, inputs, (scale,), reps)
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
                f"{op:<26} {f'{m}x{n}':>11} {row['ours_us']:9.1f} {_cell(row['ours_b2b_us'])} "
                f"{row['ours_gbps']:7.0f} {row['ours_pct_copy']:6.1f} {row['xla_us']:9.1f} "
                f"{_cell(row['xla_b2b_us'])} {row['xla_gbps']:7.0f} {row['xla_pct_copy']:6.1f} "
                f"{row['speedup']:7.2f}"
            )
            if on_row is not None:
                on_row(result)
    return result
