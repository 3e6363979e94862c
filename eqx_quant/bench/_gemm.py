"""The GEMM table of `python -m eqx_quant.bench --gemms`: eqx_quant's GEMMs and layers against
the same products in bfloat16 written in jnp, jitted by XLA, timed as the quantize ops are
(`_timing.measure`: CUDA events on a GPU). These are XLA ops (docs/performance.md,
"GEMMs"), so the table says what a user gets from XLA by multiplying quantized operands.

The ops, at (M, K, N) (x is M x K, the weights K x N; the grouped ops split the M rows into
8 ragged groups with one K x N weight each, `_grouped.group_sizes`):

- `fp8_gemm`: `eqx_quant.gemm` of per-tensor E4M3 operands, quantized beforehand (the GEMM
  alone), bf16 out; against `x @ w` in bf16.
- `fp8_dense_step`: `eqx_quant.dense` forward and backward (current scaling; E4M3 x and
  weights, E5M2 output gradient), the three quantizations included: y, dx and dw from bf16 x,
  w and dy; against the vjp of `x @ w` in bf16. Counts 3 GEMMs.
- `mxfp8_gemm`, `nvfp4_gemm`: `eqx_quant.gemm` of MXFP8 / NVFP4 operands (Hopper has no
  block-scaled MMA: their exact bfloat16 values in a bf16 GEMM); against `x @ w` in bf16.
- `fp8_block_gemm`: `eqx_quant.gemm` of E4M3 x in 1x128 blocks and weights in 128x128 tiles
  (the block-scaled GEMM op, CUTLASS on CUDA), bf16 out; against `x @ w` in bf16.
- `fp8_block_dense_step`: `fp8_dense_step` with FP8 block scaling (1x128 x and output
  gradient, 128x128 weights, all E4M3: the DeepSeek-V3 recipe).
- `fp8_grouped_gemm`, `mxfp8_grouped_gemm`: `eqx_quant.grouped_gemm` of grouped-quantized
  tokens and per-expert quantized weights (the CUTLASS grouped GEMM on CUDA; the weights'
  colwise copies, K-contiguous); against `jax.lax.ragged_dot` in bf16.
- `fp8_block_grouped_gemm`: `eqx_quant.grouped_gemm` of tokens in 1x128 blocks and
  per-expert weights in 128x128 tiles (the blockwise-scaled grouped GEMM on CUDA); against
  `jax.lax.ragged_dot` in bf16.
- `bf16_grouped_gemm`: the same grouped GEMM op on bfloat16 tokens and (G, K, N) weights;
  against `jax.lax.ragged_dot` in bf16.
- `fp8_grouped_dense_step`: `eqx_quant.grouped_dense` forward and backward (current scaling,
  E5M2 output gradient), the quantizations included; against the same three products (y, dx,
  dw) on bf16 operands through the grouped GEMM op, the fastest bf16 step we have. Counts 3
  GEMMs.
- `pallas_grouped_gemm` (a peer, not ours): JAX's Pallas Mosaic-GPU `ragged_dot`
  (`jax.experimental.pallas.ops.gpu.ragged_dot_mgpu`, Hopper) on the bf16 problem of
  `bf16_grouped_gemm`, the best of a few tile configurations timed first; against
  `jax.lax.ragged_dot`. Needs a CUDA device (skipped elsewhere).

The grouped ops run once per `--gemm-groups` entry: `G` (M split evenly into G groups) or
`zipfG` (group g of G gets rows in proportion to 1 / (g + 1), a skewed router).

TFLOP/s count 2 M K N per GEMM. Inputs rotate over 3 buffers of x (the weights are shared).
"""

import jax
import jax.numpy as jnp
import numpy as np

from ._timing import measure, micro, timing_method

GEMM_OPS = (
    "fp8_gemm", "fp8_dense_step", "mxfp8_gemm", "nvfp4_gemm", "fp8_block_gemm",
    "fp8_block_dense_step", "fp8_grouped_gemm", "mxfp8_grouped_gemm", "fp8_block_grouped_gemm",
    "bf16_grouped_gemm", "fp8_grouped_dense_step", "pallas_grouped_gemm",
)
# Tile configurations tried for the Pallas peer (block_m, block_n, block_k, steps,
# grid_block_n), from the ranges of its own autotuning script.
_PALLAS_CONFIGS = [(bm, bn, 64, steps, 1) for bm in (64, 128) for bn in (128, 256)
                   for steps in (4, 5)]
DEFAULT_GEMM_GROUPS = ("8",)
DEFAULT_GEMM_SIZES = ("4096", "8192", "16384x4096x4096")
GROUPS = 8
_COPIES = 3  # distinct x buffers the timed calls rotate over


def parse_gemm_size(text: str) -> tuple[int, int, int]:
    """"N" (M = K = N) or "MxKxN"."""
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) == 1:
        parts = parts * 3
    if len(parts) != 3 or min(parts) <= 0:
        raise ValueError(f"--gemm-sizes: expected N or MxKxN with positive ints, got {text!r}")
    return parts[0], parts[1], parts[2]


def _normal(key, shape, scale=1.0):
    return (jax.random.normal(key, shape, jnp.float32) * scale).astype(jnp.bfloat16)


def _bf16_dot(x, w):
    return jnp.dot(x, w)


def _gemm_case(quantizer, m: int, k: int, n: int, key, w_quantizer=None) -> tuple:
    """`eqx_quant.gemm` of operands quantized beforehand, and bf16 `x @ w`."""
    import eqx_quant as eqq

    keys = jax.random.split(key, _COPIES + 1)
    xs = [_normal(keys[i], (m, k)) for i in range(_COPIES)]
    w = _normal(keys[-1], (k, n), k**-0.5)
    ours_xs = [eqq.quantize(x, quantizer) for x in xs]
    wt = eqq.quantize(w, quantizer if w_quantizer is None else w_quantizer)

    def ours(xt, wt):
        return eqq.gemm(xt, wt, out_dtype=jnp.bfloat16)

    return ours, ours_xs, (wt,), _bf16_dot, xs, (w,), 2


def _dense_case(m: int, k: int, n: int, key, quantizers=None) -> tuple:
    """`eqx_quant.dense` forward + backward (per-tensor current scaling unless `quantizers`
    are given), and the vjp of bf16 `x @ w`."""
    import eqx_quant as eqq

    if quantizers is None:
        quantizers = eqq.DenseQuantizers(
            eqq.CurrentScaleQuantizer(), eqq.CurrentScaleQuantizer(),
            eqq.CurrentScaleQuantizer(q_dtype=jnp.float8_e5m2),
        )
    keys = jax.random.split(key, _COPIES + 2)
    xs = [_normal(keys[i], (m, k)) for i in range(_COPIES)]
    w = _normal(keys[-2], (k, n), k**-0.5)
    dy = _normal(keys[-1], (m, n))

    def step(layer):
        def run(x, w, dy):
            y, vjp = jax.vjp(layer, x, w)
            return (y, *vjp(dy))

        return run

    ours = step(lambda x, w: eqq.dense(x, w, quantizers=quantizers))
    return ours, xs, (w, dy), step(_bf16_dot), xs, (w, dy), 6


def grouped_sizes(m: int, groups: str) -> np.ndarray:
    """The group sizes of a `--gemm-groups` entry: "G" (even) or "zipfG" (1 / (g + 1))."""
    zipf = groups.startswith("zipf")
    g = int(groups[4:] if zipf else groups)
    if g <= 0:
        raise ValueError(f"--gemm-groups: expected G or zipfG with G > 0, got {groups!r}")
    weights = 1.0 / np.arange(1, g + 1) if zipf else np.ones(g)
    sizes = np.floor(m * weights / weights.sum()).astype(np.int64)
    sizes[0] += m - sizes.sum()
    return sizes.astype(np.int32)


def _grouped_case(make_quantizer, m: int, k: int, n: int, key, groups: str,
                  make_weight_quantizer=None) -> tuple:
    """`eqx_quant.grouped_gemm` of grouped tokens and per-expert weights quantized
    beforehand (None: the grouped GEMM op on bf16 operands), and bf16 `ragged_dot`."""
    import eqx_quant as eqq
    from eqx_quant._gemm import grouped_rows

    keys = jax.random.split(key, _COPIES + 1)
    sizes = jnp.asarray(grouped_sizes(m, groups), jnp.int32)
    g = sizes.shape[0]
    xs = [_normal(keys[i], (m, k)) for i in range(_COPIES)]
    w = _normal(keys[-1], (g, k, n), k**-0.5)

    def xla(x, w, sizes):
        return jax.lax.ragged_dot(x, w, sizes)

    if make_quantizer is None:
        def bf16(x, w, sizes):
            return grouped_rows(x, w, sizes, transposed=False, out_dtype="bfloat16")

        return bf16, xs, (w, sizes), xla, xs, (w, sizes), 2

    ours_xs = [eqq.grouped_quantize(x, sizes, make_quantizer()) for x in xs]
    weight_q = (make_weight_quantizer or make_quantizer)(
        q_layout=eqq.QuantizeLayout.ROWWISE_COLWISE)
    wt = jax.vmap(lambda wi: eqq.quantize(wi, weight_q))(w)

    def ours(gx, wt):
        return eqq.grouped_gemm(gx, wt, out_dtype=jnp.bfloat16)

    return ours, ours_xs, (wt,), xla, xs, (w, sizes), 2


def _grouped_dense_case(m: int, k: int, n: int, key, groups: str) -> tuple:
    """`eqx_quant.grouped_dense` forward + backward in current scaling, and the same three
    products in bf16 on the grouped GEMM op."""
    import eqx_quant as eqq
    from eqx_quant._gemm import grouped_outer, grouped_rows

    keys = jax.random.split(key, _COPIES + 2)
    sizes = jnp.asarray(grouped_sizes(m, groups), jnp.int32)
    g = sizes.shape[0]
    xs = [_normal(keys[i], (m, k)) for i in range(_COPIES)]
    w = _normal(keys[-2], (g, k, n), k**-0.5)
    dy = _normal(keys[-1], (m, n))
    quantizers = eqq.DenseQuantizers(
        eqq.CurrentScaleQuantizer(), eqq.CurrentScaleQuantizer(),
        eqq.CurrentScaleQuantizer(q_dtype=jnp.float8_e5m2),
    )

    def ours(x, w, sizes, dy):
        y, vjp = jax.vjp(
            lambda x, w: eqq.grouped_dense(x, w, sizes, quantizers=quantizers, check=False), x, w)
        return (y, *vjp(dy))

    def bf16(x, w, sizes, dy):
        y = grouped_rows(x, w, sizes, transposed=False, out_dtype="bfloat16")
        dx = grouped_rows(dy, w, sizes, transposed=True, out_dtype="bfloat16")
        dw = grouped_outer(x, dy, sizes, transposed=False, k=k, n=n, out_dtype="bfloat16")
        return y, dx, dw

    return ours, xs, (w, sizes, dy), bf16, xs, (w, sizes, dy), 6


def gemm_case(op: str, m: int, k: int, n: int, groups: str = "8") -> tuple:
    """(ours, ours' rotated inputs, ours' shared inputs, the bf16 version, its rotated inputs,
    its shared inputs, FLOPs per (M K N))."""
    import eqx_quant as eqq

    key = jax.random.PRNGKey(m * 7 + k * 3 + n)
    if op == "fp8_gemm":
        return _gemm_case(eqq.CurrentScaleQuantizer(), m, k, n, key)
    if op == "fp8_dense_step":
        return _dense_case(m, k, n, key)
    if op == "mxfp8_gemm":
        return _gemm_case(eqq.BlockScaleQuantizer(), m, k, n, key)
    if op == "nvfp4_gemm":
        return _gemm_case(eqq.NVFP4Quantizer(), m, k, n, key)
    if op == "fp8_block_gemm":  # DeepSeek-V3's layout: 1x128 activations, 128x128 weights
        return _gemm_case(eqq.Float8BlockQuantizer(), m, k, n, key,
                          eqq.Float8BlockQuantizer(block="128x128"))
    if op == "fp8_block_dense_step":
        one_d = eqq.Float8BlockQuantizer()
        quantizers = eqq.DenseQuantizers(one_d, eqq.Float8BlockQuantizer(block="128x128"),
                                         one_d)
        return _dense_case(m, k, n, key, quantizers)
    if op == "fp8_grouped_gemm":
        return _grouped_case(eqq.CurrentScaleQuantizer, m, k, n, key, groups)
    if op == "mxfp8_grouped_gemm":
        return _grouped_case(eqq.BlockScaleQuantizer, m, k, n, key, groups)
    if op == "fp8_block_grouped_gemm":
        return _grouped_case(eqq.Float8BlockQuantizer, m, k, n, key, groups,
                             lambda **kw: eqq.Float8BlockQuantizer(block="128x128", **kw))
    if op == "bf16_grouped_gemm":
        return _grouped_case(None, m, k, n, key, groups)
    if op == "fp8_grouped_dense_step":
        return _grouped_dense_case(m, k, n, key, groups)
    if op == "pallas_grouped_gemm":
        return _pallas_case(m, k, n, key, groups)
    raise ValueError(f"op must be one of {GEMM_OPS}, got {op!r}")


def _pallas_case(m: int, k: int, n: int, key, groups: str) -> tuple:
    """JAX's Pallas Mosaic-GPU `ragged_dot` on `bf16_grouped_gemm`'s problem, in its fastest
    configuration of `_PALLAS_CONFIGS` (each timed once; those that do not fit are skipped)."""
    from jax.experimental.pallas.ops.gpu import ragged_dot_mgpu

    _, xs, (w, sizes), xla, xla_xs, xla_shared, flops = _grouped_case(None, m, k, n, key, groups)
    best, best_seconds = None, float("inf")
    for bm, bn, bk, steps, grid_n in _PALLAS_CONFIGS:
        if n % (bn * grid_n) or k % bk:
            continue

        def peer(x, w, sizes, bm=bm, bn=bn, bk=bk, steps=steps, grid_n=grid_n):
            return ragged_dot_mgpu.ragged_dot(
                x, w, group_sizes=sizes, block_m=bm, block_n=bn, block_k=bk,
                max_concurrent_steps=steps, grid_block_n=grid_n)

        try:
            seconds = measure(peer, xs, (w, sizes), 2)["seconds"]
        except Exception:  # noqa: BLE001 - a configuration that does not compile or fit
            continue
        if seconds < best_seconds:
            best, best_seconds = peer, seconds
    if best is None:
        raise RuntimeError("no Pallas ragged_dot configuration ran on this device")
    return best, xs, (w, sizes), xla, xla_xs, xla_shared, flops


def _applies(op: str, m: int, k: int, n: int) -> str | None:
    """Why `op` cannot run at (m, k, n), or None."""
    if op == "pallas_grouped_gemm" and jax.default_backend() != "gpu":
        return "needs a CUDA device (Pallas Mosaic GPU)"
    block = 32 if "mxfp8" in op else 16 if "nvfp4" in op else 1
    if (m % block or k % block or n % block) and block > 1:
        return f"needs multiples of {block}"
    return None


def run_gemm_benchmark(sizes, reps: int, ops=GEMM_OPS, log=print, on_row=None,
                       groups=DEFAULT_GEMM_GROUPS) -> dict:
    """The GEMM table of `python -m eqx_quant.bench --gemms`: the result dict (`gemm_rows`,
    the device and the timing method); `on_row`, if given, is called with the result so far
    after every row."""
    import eqx_quant as eqq

    device = jax.devices()[0]
    timing, timing_detail = timing_method()
    log(f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}, "
        f"eqx_quant kernels: {eqq.library_paths()}")
    log(f"timing: {timing}: {timing_detail}")
    rows = []
    result = dict(device=str(device.device_kind), backend=jax.default_backend(),
                  jax=jax.__version__, timing=timing, timing_detail=timing_detail,
                  gemm_rows=rows)
    header = (
        f"{'op':<30} {'M x K x N':>17} {'ours us':>9} {'b2b':>8} {'TFLOP/s':>8} "
        f"{'bf16 us':>9} {'b2b':>8} {'TFLOP/s':>8} {'speedup':>7}"
    )
    log(header)
    log("-" * len(header))
    cases = [(m, k, n, op, g) for m, k, n in sizes for op in ops
             for g in (groups if "grouped" in op else (None,))]
    for m, k, n, op, g in cases:
            shape = f"{m}x{k}x{n}"
            label = op if g is None else f"{op}@{g}"
            why_not = _applies(op, m, k, n)
            if why_not is not None:
                log(f"{label:<30} {shape:>17} skipped: {why_not}")
                continue
            ours, ours_xs, ours_shared, xla, xla_xs, xla_shared, flops = gemm_case(
                op, m, k, n, g or "8")
            ours_measured = measure(ours, ours_xs, ours_shared, reps)
            xla_measured = measure(xla, xla_xs, xla_shared, reps)
            work = flops * float(m) * k * n
            row = dict(
                op=op, groups=g, shape=[m, k, n], flops=work,
                ours_us=ours_measured["seconds"] * 1e6,
                ours_b2b_us=micro(ours_measured["b2b_seconds"]),
                ours_tflops=work / ours_measured["seconds"] / 1e12,
                xla_us=xla_measured["seconds"] * 1e6,
                xla_b2b_us=micro(xla_measured["b2b_seconds"]),
                xla_tflops=work / xla_measured["seconds"] / 1e12,
                speedup=xla_measured["seconds"] / ours_measured["seconds"],
                ours_samples=ours_measured["samples"], xla_samples=xla_measured["samples"],
            )
            rows.append(row)
            log(
                f"{label:<30} {shape:>17} {row['ours_us']:9.1f} {_cell(row['ours_b2b_us'])} "
                f"{row['ours_tflops']:8.1f} {row['xla_us']:9.1f} {_cell(row['xla_b2b_us'])} "
                f"{row['xla_tflops']:8.1f} {row['speedup']:7.2f}"
            )
            if on_row is not None:
                on_row(result)
    return result



def _cell(us: float | None) -> str:
    return f"{'-':>8}" if us is None else f"{us:8.1f}"
