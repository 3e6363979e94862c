"""Where the block-format GEMMs lose to a bf16 GEMM on the H200, and what XLA's cuDNN
ragged-dot fusion gives the grouped GEMMs (run by `benchmarks/probes/gpu_gemm_paths`).

The bench (`--gemms`, 8192^3) measured `mxfp8_gemm` 2583 us and `nvfp4_gemm` 3173 us against
1532 us for a bf16 GEMM: ~1050 / 1650 us over it, ten times what the dequantization's bytes
need (~90 us). Variants, each timed with the bench's CUDA events:

- `library`: `eqx_quant.gemm` (dequantize to exact bf16, dot, NVFP4's global scales);
- `barrier`: the same operands materialized first (an optimization barrier between the
  dequantization and the dot, so XLA cannot fuse the dequantization into the GEMM);
- `dequantize`: the two dequantizations alone;
- `bf16`: `x @ w` in bf16.

Predictions: `dequantize` ~90-150 us; `barrier` ~ bf16 + dequantize (~1.65 ms at 8192^3);
if `library` is far above `barrier`, XLA fuses the dequantization into the GEMM's operand
loads and the library should materialize its operands.

With `--grouped`: `grouped_gemm` (FP8, MXFP8) and bf16 `ragged_dot` at 16384x4096x4096 in 8
groups; run once as is and once with XLA_FLAGS=--xla_gpu_experimental_use_ragged_dot_fusion
=true (openxla/xla#40189: cuDNN lowers fprop/dgrad ragged dots instead of a dense dot per
group). Prediction: bf16 ragged_dot from ~100 TFLOP/s to ~500+ with the flag.
"""

import sys

import jax
import jax.numpy as jnp

import eqx_quant as eqq
from eqx_quant._gemm._dense import _bf16_values, _product, _spec
from eqx_quant._gemm._operands import product_factor
from eqx_quant.bench import _grouped as _bench_grouped
from eqx_quant.bench._timing import measure


def _arrays(part):
    return part.data, part.scale_inv, part.amax


def gemm_variants(quantizer, m, k, n, reps):
    key = jax.random.PRNGKey(0)
    xs = [jax.random.normal(jax.random.fold_in(key, i), (m, k), jnp.bfloat16) for i in range(3)]
    w = (jax.random.normal(jax.random.fold_in(key, 9), (k, n), jnp.float32) * k**-0.5)
    w = w.astype(jnp.bfloat16)
    xts = [eqq.quantize(x, quantizer) for x in xs]
    wt = eqq.quantize(w, quantizer)
    spec, _, rp = _spec(xts[0], wt, ((1,), (0,)), jnp.bfloat16)

    def operands(xt, wt):
        lp = xt.rowwise
        la, ra = _arrays(lp), _arrays(wt.colwise)
        return la, ra, _bf16_values(la, spec.lhs), _bf16_values(ra, spec.rhs)

    def finish(y, la, ra):
        lf = product_factor(spec.lhs.meta.scaling_mode, la)  # NVFP4's global scales
        rf = product_factor(spec.rhs.meta.scaling_mode, ra)
        if lf is not None:
            y = y * (lf[0] * rf[0])
        return y.astype(jnp.bfloat16)

    def barrier(xt, wt):
        la, ra, a, b = operands(xt, wt)
        a, b = jax.lax.optimization_barrier((a, b))
        return finish(_product(a, b, spec, None), la, ra)

    def dequantize(xt, wt):
        return operands(xt, wt)[2:]

    variants = {
        "library": (lambda xt, wt: eqq.gemm(xt, wt, out_dtype=jnp.bfloat16), xts, (wt,)),
        "barrier": (barrier, xts, (wt,)),
        "dequantize": (dequantize, xts, (wt,)),
        "bf16": (lambda x, w: x @ w, xs, (w,)),
    }
    flops = 2.0 * m * k * n
    for name, (fn, inputs, shared) in variants.items():
        us = measure(fn, inputs, shared, reps)["seconds"] * 1e6
        print(f"{type(quantizer).__name__:<20} {name:<11} {m}x{k}x{n} {us:9.1f} us "
              f"{flops / us / 1e6:7.1f} TFLOP/s", flush=True)


def grouped_variants(m, k, n, reps):
    key = jax.random.PRNGKey(1)
    sizes = jnp.asarray(_bench_grouped.group_sizes(m), jnp.int32)
    xs = [jax.random.normal(jax.random.fold_in(key, i), (m, k), jnp.bfloat16) for i in range(3)]
    w = (jax.random.normal(key, (8, k, n), jnp.float32) * k**-0.5).astype(jnp.bfloat16)
    flops = 2.0 * m * k * n
    cases = {"bf16 ragged_dot": (lambda x, w, s: jax.lax.ragged_dot(x, w, s), xs, (w, sizes))}
    for name, q in (("fp8 grouped_gemm", eqq.CurrentScaleQuantizer()),
                    ("mxfp8 grouped_gemm", eqq.BlockScaleQuantizer())):
        gxs = [eqq.grouped_quantize(x, sizes, q) for x in xs]
        wt = jax.vmap(lambda wi, q=q: eqq.quantize(wi, q))(w)
        cases[name] = (lambda g, wt: eqq.grouped_gemm(g, wt, out_dtype=jnp.bfloat16), gxs, (wt,))
    for name, (fn, inputs, shared) in cases.items():
        us = measure(fn, inputs, shared, reps)["seconds"] * 1e6
        print(f"{name:<20} {m}x{k}x{n} {us:9.1f} us {flops / us / 1e6:7.1f} TFLOP/s", flush=True)


if __name__ == "__main__":
    if "--grouped" in sys.argv:
        grouped_variants(16384, 4096, 4096, reps=3)
    else:
        for q in (eqq.BlockScaleQuantizer(), eqq.NVFP4Quantizer()):
            gemm_variants(q, 8192, 8192, 8192, reps=3)
