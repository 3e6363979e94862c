"""Shared pieces of the GEMM tests (tests/gemm/, tests/cuda/test_cuda_gemm.py): the oracle's
float64 values of a quantized part, the float32-accumulation bounds of a product, the dot
operand types of a traced or lowered function, the `dense` recipes and the expert GEMM's
tokens and groups."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np

import eqx_quant as eqq
from tests.oracle import nd as oracle_nd

F32 = np.float32

# The expert GEMM's tokens and groups (test_grouped_gemm.py, test_grouped_wgrad.py).
M, K, N = 160, 64, 24
SIZES = [40, 0, 75, 33]  # an empty group, sizes off every block multiple, 12 rows past the sum
G = len(SIZES)


def oracle_values(part) -> np.ndarray:
    """float64 values of one part in the original layout, from NumPy + ml_dtypes only."""
    shape, fa = part.original_shape, part.flatten_axis
    mode = part.scaling_mode
    if mode.is_tensor_scaling:
        v = np.asarray(part.data).astype(np.float64) * float(np.asarray(part.scale_inv)[0])
        if part.data_layout == "T":
            split = len(shape) - fa
            v = np.transpose(v, tuple(range(split, len(shape))) + tuple(range(split)))
        return v
    if mode is eqq.ScalingMode.MXFP8_1D_SCALING:
        v = oracle_nd.mxfp8_dequantize_nd(
            part.data, part.scale_inv, F32, fa, rowwise=not part.is_colwise
        )
        return v.astype(np.float64)
    use_rht = part.rht_sign_mask is not None
    v = oracle_nd.nvfp4_dequantize_nd(
        part.data, part.scale_inv, np.asarray(part.amax), F32, shape, fa,
        rowwise=not part.is_colwise, use_rht=use_rht,
        sign_mask=part.rht_sign_mask if use_rht else 0xD7E8,
    )
    return v.astype(np.float64)


def sum_error(k: int) -> float:
    """Relative bound (of sum |a| |b|) on a product's error from its float32 sums of k terms.
    On a GPU, cuBLASLt may accumulate FP8 products with fewer bits ("fast accumulation" on
    Hopper), so the bound there is 2^-10 (tests/cuda/test_cuda_gemm.py checks the GPU path)."""
    cpu = (k + 4) * 2.0**-24
    return cpu if jax.default_backend() == "cpu" else max(cpu, 2.0**-10)


def assert_product(y, a, b, dims, what=""):
    """y against tensordot(a, b) in float64, within the bound of float32 sums of K terms and
    one rounding to y's dtype."""
    ref = np.tensordot(a, b, axes=dims)
    k = math.prod(a.shape[d] for d in dims[0])
    bound = np.tensordot(np.abs(a), np.abs(b), axes=dims) * sum_error(k)
    bound += np.abs(ref) * float(jnp.finfo(y.dtype).eps)
    got = np.asarray(y.astype(jnp.float32), np.float64)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    err = np.abs(got - ref)
    assert np.all(err <= bound + 1e-30), (what, float(err.max()), float((err - bound).max()))


def assert_same_sums(got, want, what=""):
    """Two computations of the same products of the same quantized values, whose float32
    sums XLA may order differently (a batched, sharded or otherwise fused dot): equal up to
    a few float32 ulps of the largest value, plus one rounding to the output's dtype. On a
    GPU, FP8 tensor-core GEMMs accumulate with fewer bits than float32 (Hopper; the
    difference seen between two programs: 2^-12 of the largest value), so 2^-9 there."""
    got = jnp.asarray(got)
    a = np.asarray(got.astype(jnp.float32), np.float64)
    b = np.asarray(jnp.asarray(want).astype(jnp.float32), np.float64)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    scale = np.abs(b).max() if b.size else 0.0
    rel = 2.0**-20 if jax.default_backend() == "cpu" else 2.0**-9
    tol = float(jnp.finfo(got.dtype).eps) * np.abs(b) + rel * scale
    assert np.all(np.abs(a - b) <= tol), (what, float(np.abs(a - b).max()))


def dot_operand_dtypes(fn, *args) -> list[tuple[str, ...]]:
    """The operand dtypes of every dot_general / ragged_dot(_general) in fn's jaxpr (nested
    jaxprs included: custom_vjp, custom_vmap, pjit)."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name.startswith(("dot_general", "ragged_dot")):
                found.append(tuple(v.aval.dtype.name for v in eqn.invars[:2]))
            for param in eqn.params.values():
                for sub in param if isinstance(param, (tuple, list)) else (param,):
                    if isinstance(sub, jax.extend.core.ClosedJaxpr):
                        walk(sub.jaxpr)
                    elif isinstance(sub, jax.extend.core.Jaxpr):
                        walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def lowered_dot_operand_types(fn, args, platform: str) -> list[tuple[str, str]]:
    """The element types of the two operands of every dot (`stablehlo.dot_general`,
    `chlo.ragged_dot`) in fn's StableHLO lowered for `platform` (no device of it needed)."""
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,)).as_text()
    found = []
    for line in text.splitlines():
        if "stablehlo.dot_general" in line or "chlo.ragged_dot" in line:
            types = r": \(tensor<(?:\d+x)*(\w+)>, tensor<(?:\d+x)*(\w+)>"
            found.append(re.search(types, line).groups())
    return found


# `dense` recipes (test_dense.py, test_grouped_dense.py).


def delayed_quantizer(q_dtype=jnp.float8_e4m3fn, scale=1.0):
    return eqq.DelayedScaleQuantizer(
        q_dtype=q_dtype, amax_history_len=4, scale=jnp.array([scale], jnp.float32)
    )


DENSE_RECIPES = {
    # TE's recipes: E4M3 forward, E5M2 gradients (HYBRID); MXFP8; NVFP4 with 2D weights,
    # RHT on the weight-gradient operands and stochastic rounding on the gradient.
    "delayed_hybrid": lambda: eqq.DenseQuantizers(
        delayed_quantizer(scale=64.0),
        delayed_quantizer(scale=256.0),
        delayed_quantizer(jnp.float8_e5m2, 2.0**14),
    ),
    "current": lambda: eqq.DenseQuantizers(
        eqq.CurrentScaleQuantizer(), eqq.CurrentScaleQuantizer(),
        eqq.CurrentScaleQuantizer(q_dtype=jnp.float8_e5m2),
    ),
    "mxfp8": lambda: eqq.DenseQuantizers(
        eqq.BlockScaleQuantizer(), eqq.BlockScaleQuantizer(),
        eqq.BlockScaleQuantizer(q_dtype=jnp.float8_e5m2),
    ),
    "nvfp4": lambda: eqq.DenseQuantizers(
        eqq.NVFP4Quantizer(use_rht=True), eqq.NVFP4Quantizer(use_2d=True),
        eqq.NVFP4Quantizer(use_rht=True, stochastic_rounding=True),
    ),
}
