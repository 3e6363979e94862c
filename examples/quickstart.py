"""Quick start: quantize an activation-like tensor in every mode and measure what it costs.

For each scaling mode (FP8 current and delayed per-tensor scaling, MXFP8, NVFP4 1D / 2D /
with stochastic rounding) this prints one line: the mode, the payload dtype, the signal-to-
quantization-noise ratio (SQNR) of the rowwise copy, the largest absolute error, the
fraction of elements that were clipped (|x * scale| > the format's max, with the scale of
the element's tensor or block), and whether the rowwise and colwise copies dequantize to the
same values ("-" where the two copies are quantized along different blocks, so they are
not meant to agree). NVFP4 clips a few percent of elements by a hair: it rounds each
E4M3 block scale to nearest, as TE does, so about half of the block maxima land just above
6. Runs on CPU in a few seconds: `python examples/quickstart.py`.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # CPU by default; JAX_PLATFORMS=cuda for a GPU

import jax
import jax.numpy as jnp
import numpy as np

import eqx_quant as eqq

SHAPE = (1024, 1024)


def activation_like(seed: int) -> jax.Array:
    """A bf16 Gaussian with a few heavy-tailed outliers, as in transformer activations."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(SHAPE, dtype=np.float32)
    spikes = rng.choice(x.size, size=64, replace=False)  # 64 of ~1M elements
    x.flat[spikes] *= rng.uniform(10.0, 60.0, size=spikes.size).astype(np.float32)
    return jnp.asarray(x, jnp.bfloat16)


# Each row quantizes x and returns (tensor, x * scale in float32). The scaled values are
# what the kernel rounds, so saturation is counted on exactly what was cast. Block-scaled
# formats (MXFP8, NVFP4) fit the same shape: their x * scale broadcasts one scale per block.
def current(q_dtype):
    @jax.jit
    def run(x):
        tensor = eqq.quantize(x, eqq.CurrentScaleQuantizer(q_dtype))
        one = jnp.ones((1,), jnp.float32)  # the scale current scaling used: fp8_max / amax(x)
        scale = eqq.reference.compute_scale(tensor.amax, jnp.dtype(q_dtype).name, 0.0, one)
        return tensor, x.astype(jnp.float32) * scale

    return run


@jax.jit
def delayed_step(quantizer, x):
    """One "training step": quantize with the current state, then fold in the new amax."""
    tensor = eqq.quantize(x, quantizer)  # uses the scale from the history, not x's amax
    return tensor, x.astype(jnp.float32) * quantizer.scale, quantizer.update(tensor.amax)


def delayed(q_dtype, warmup_steps=4):
    def run(x):
        quantizer = eqq.DelayedScaleQuantizer(q_dtype, amax_history_len=16)
        for step in range(warmup_steps):  # earlier steps on similar tensors warm the history
            _, _, quantizer = delayed_step(quantizer, activation_like(seed=100 + step))
        tensor, scaled, _ = delayed_step(quantizer, x)
        return tensor, scaled

    return run


def block(quantizer, **kwargs):
    """Block formats: x divided by the scale of each element's block (rowwise blocks)."""

    @jax.jit
    def run(x):
        tensor = eqq.quantize(x, quantizer, **kwargs)
        part = tensor.rowwise
        scale = part.scale_inv.astype(jnp.float32)  # one per block along the last axis
        if isinstance(quantizer, eqq.NVFP4Quantizer):
            scale = scale * (part.amax / 2688.0)  # times the global decode scale
        per_element = jnp.repeat(scale, quantizer.block_size, axis=-1)[:, : x.shape[-1]]
        return tensor, x.astype(jnp.float32) / per_element

    return run


ROWS = [  # (mode, q_dtype, run, rowwise and colwise are quantized alike)
    ("current", jnp.float8_e4m3fn, current(jnp.float8_e4m3fn), True),
    ("current", jnp.float8_e5m2, current(jnp.float8_e5m2), True),
    ("delayed", jnp.float8_e4m3fn, delayed(jnp.float8_e4m3fn), True),
    ("mxfp8", jnp.float8_e4m3fn, block(eqq.BlockScaleQuantizer(jnp.float8_e4m3fn)), False),
    ("mxfp8", jnp.float8_e5m2, block(eqq.BlockScaleQuantizer(jnp.float8_e5m2)), False),
    ("nvfp4", jnp.float4_e2m1fn, block(eqq.NVFP4Quantizer()), False),
    ("nvfp4_2d", jnp.float4_e2m1fn, block(eqq.NVFP4Quantizer(use_2d=True)), True),
    (
        "nvfp4_sr",
        jnp.float4_e2m1fn,
        block(eqq.NVFP4Quantizer(stochastic_rounding=True), key=jax.random.key(0)),
        False,
    ),
]


@jax.jit
def dequantize_both(tensor):
    """Both copies back in x's layout: they share one scale, so they should agree exactly."""
    return tensor.rowwise.dequantize(), tensor.colwise.dequantize()


def main() -> None:
    x = activation_like(seed=0)
    x64 = np.asarray(x, np.float64)
    kernels = sorted(eqq.native_platforms())
    print(f"x: {x.shape} {x.dtype}, amax {np.max(np.abs(x64)):.1f}, kernels on {kernels}")
    row = "{:<10}{:<16}{:>9}{:>13}{:>12}{:>18}".format
    print(row("mode", "q_dtype", "SQNR_dB", "max_abs_err", "saturated", "rowwise==colwise"))
    for mode, q_dtype, run, alike in ROWS:
        tensor, scaled = run(x)
        rowwise, colwise = (np.asarray(a, np.float64) for a in dequantize_both(tensor))
        noise = x64 - rowwise
        sqnr_db = 10.0 * np.log10(np.sum(x64**2) / np.sum(noise**2))
        max_err = np.max(np.abs(noise))
        q_max = float(jnp.finfo(q_dtype).max)
        saturated = np.mean(np.abs(np.asarray(scaled)) > q_max)
        agree = str(np.array_equal(rowwise, colwise)) if alike else "-"
        cells = (f"{sqnr_db:.2f}", f"{max_err:.4g}", f"{saturated:.2e}", agree)
        print(row(mode, jnp.dtype(q_dtype).name, *cells))


if __name__ == "__main__":
    main()
