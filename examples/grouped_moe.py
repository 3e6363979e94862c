"""Quantize the tokens of a mixture-of-experts layer, grouped by expert (runs on CPU).

A router sends each of 1024 tokens to one of 8 experts; the tokens are sorted by expert, so
each expert's tokens form a contiguous group of rows whose size is only known on the device.
`grouped_quantize` quantizes all groups in one op, with blocks and scales that never straddle
two experts, and `grouped_quantize_dbias` also returns each expert's bias gradient. The
script checks the contract (each group equals the dense quantize of its rows) and prints the
per-expert error of MXFP8, NVFP4 and per-expert current-scaled FP8. Then it runs the experts'
layer itself, `grouped_dense` with MXFP8 (every GEMM, forward and backward, on quantized
operands), and prints the SQNR of its output and gradients against the float32 layer:

    python examples/grouped_moe.py
"""

import jax
import jax.numpy as jnp
import numpy as np

import eqx_quant as eqq

TOKENS, HIDDEN, EXPERTS = 1024, 256, 8


def route(key):
    """Tokens sorted by expert and the (device-side) number of tokens per expert."""
    k_x, k_e = jax.random.split(key)
    x = jax.random.normal(k_x, (TOKENS, HIDDEN), jnp.float32)
    expert = jax.random.categorical(k_e, jnp.linspace(0.0, 2.0, EXPERTS), shape=(TOKENS,))
    # Experts see differently scaled activations, so one scale for all would waste range.
    x = x * (2.0 ** expert.astype(jnp.float32))[:, None]
    order = jnp.argsort(expert)
    sizes = jnp.bincount(expert, length=EXPERTS).astype(jnp.int32)
    return x[order].astype(jnp.bfloat16), sizes


def sqnr_db(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    noise = np.sum((x - y) ** 2)
    return float("inf") if noise == 0 else 10 * np.log10(np.sum(x**2) / noise)


def main():
    x, sizes = route(jax.random.key(0))
    starts = np.concatenate([[0], np.cumsum(np.asarray(sizes))[:-1]])
    print(f"tokens per expert: {np.asarray(sizes).tolist()}")
    quantizers = {
        "fp8 current": eqq.CurrentScaleQuantizer(),
        "mxfp8": eqq.BlockScaleQuantizer(),
        "nvfp4": eqq.NVFP4Quantizer(),
    }
    step = jax.jit(lambda x, s, q: eqq.grouped_quantize_dbias(x, s, q))
    for name, q in quantizers.items():
        gt, dbias = step(x, sizes, q)
        y = gt.dequantize()
        per_expert = []
        for g in range(EXPERTS):
            rows = slice(int(starts[g]), int(starts[g]) + int(sizes[g]))
            # The contract: this expert's rows equal the dense quantize of those rows alone.
            dense = eqq.quantize(x[rows], q)
            same = np.array_equal(
                np.asarray(gt.rowwise.group_part(g).data).view(np.uint8),
                np.asarray(dense.rowwise.data).view(np.uint8),
            )
            if not same:
                raise SystemExit(f"{name}: expert {g} differs from the dense quantize")
            per_expert.append(sqnr_db(x[rows], y[rows]))
        ref_dbias = jax.ops.segment_sum(
            x.astype(jnp.float32),
            jnp.repeat(jnp.arange(EXPERTS), sizes, total_repeat_length=TOKENS),
        )
        # dbias is rounded once to bfloat16 (8 significant bits), relative to the largest sum.
        err = jnp.abs(dbias.astype(jnp.float32) - ref_dbias)
        dbias_err = float(jnp.max(err) / jnp.max(jnp.abs(ref_dbias)))
        print(
            f"{name:12s} SQNR per expert (dB): "
            + " ".join(f"{v:5.1f}" for v in per_expert)
            + f" | dbias max err / max |sum| vs segment_sum {dbias_err:.1e}"
        )
    expert_layer(x, sizes)


def expert_layer(x, sizes):
    """The experts' linear layer with MXFP8 GEMMs, and its float32 twin (a ragged_dot)."""
    k_w, k_b, k_dy = jax.random.split(jax.random.key(1), 3)
    out = 128
    kernel = jax.random.normal(k_w, (EXPERTS, HIDDEN, out), jnp.float32) / np.sqrt(HIDDEN)
    bias = jax.random.normal(k_b, (EXPERTS, out), jnp.float32)
    dy = jax.random.normal(k_dy, (TOKENS, out), jnp.float32)
    x = x.astype(jnp.float32)
    mxfp8 = eqq.BlockScaleQuantizer()
    quantizers = eqq.DenseQuantizers(mxfp8, mxfp8, eqq.BlockScaleQuantizer(jnp.float8_e5m2))

    def quantized(x, kernel, bias):
        return eqq.grouped_dense(x, kernel, sizes, bias, quantizers=quantizers)

    def exact(x, kernel, bias):
        expert = jnp.repeat(jnp.arange(EXPERTS), sizes, total_repeat_length=TOKENS)
        y = jax.lax.ragged_dot(x, kernel, sizes, precision=jax.lax.Precision.HIGHEST)
        return y + bias[expert]

    results = []
    for layer in (quantized, exact):
        y, pullback = jax.vjp(jax.jit(layer), x, kernel, bias)
        results.append((y, *pullback(dy)))
    names = ("y", "dx", "dkernel", "dbias")
    print("mxfp8 expert layer SQNR vs float32 (dB): " + " ".join(
        f"{n} {sqnr_db(want, got):.1f}" for n, got, want in zip(names, *results)
    ))


if __name__ == "__main__":
    main()
