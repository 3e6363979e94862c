"""Shapes, layouts and inputs shared by the FP8 and block-format tests."""

import itertools

import jax.numpy as jnp
import ml_dtypes
import numpy as np

import eqx_quant as eqq

LAYOUTS = list(eqq.QuantizeLayout)

# (shape, flatten_axis): TE's quantize suite (§10.2) minus the 67M-element one, plus odd shapes.
TE_SHAPES = [
    ((32, 64), -1),
    ((2, 64, 32), -1),
    ((64, 2, 32), -2),
    ((32, 256, 128), -1),
    ((32, 256, 128), -2),
    ((64, 32, 32, 256), -1),
]
ODD_SHAPES = [
    ((1, 7), -1),
    ((7, 1), -1),
    ((7, 13), -1),
    ((3, 5, 7), -2),
    ((3, 5, 7), -3),
    ((13,), -1),
    ((0, 5), -1),
    ((5, 0), -1),
    ((2, 0, 3), -1),
]
SHAPES = TE_SHAPES + ODD_SHAPES


def every_then_cycled(full, cycled, combos) -> list[tuple]:
    """Cases `(*case, *combo)`: each case of `full` with every combination in `combos`, then
    each case of `cycled` with one combination in turn. The odd shapes exercise edges and
    partial tiles, not dtypes, so every dtype still meets them without the full product."""
    combos = list(combos)
    return [(*case, *combo) for case in full for combo in combos] + [
        (*case, *combos[i % len(combos)]) for i, case in enumerate(cycled)
    ]


def product_with_one_in_turn(choices, *axes) -> list[tuple]:
    """Cases `(*combination, choice)`: every combination of the `axes`' values, each with the
    choice at the sum of the combination's indices modulo `len(choices)`, so that every
    choice meets every value of each axis without the full product."""
    return [
        (*(axis[i] for axis, i in zip(axes, index)), choices[sum(index) % len(choices)])
        for index in itertools.product(*(range(len(axis)) for axis in axes))
    ]


def random_input(shape, dtype, seed=0, scale=3.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * scale
    return np.asarray(jnp.asarray(x, dtype))


def rounding_tie_rows(dtype) -> np.ndarray:
    """Two rows whose float32 sum is every finite `dtype` value a plus exactly half its ulp
    (a tie), 1/4 and 3/4 of it, and their negations, in the same sign and the other."""
    info = ml_dtypes.finfo(dtype)
    a = np.arange(2**16, dtype=np.uint16).view(dtype).astype(np.float32)
    a = a[np.isfinite(a)]
    _, exp2 = np.frexp(a)  # a = f * 2^exp2, 0.5 <= |f| < 1
    half_ulp = np.ldexp(np.float32(1), np.maximum(exp2 - 1, info.minexp) - info.nmant - 1)
    rows = [
        (a, (np.sign(a) * s * half_ulp).astype(np.float32))
        for s in (1.0, 0.5, 1.5, -1.0, -0.5, -1.5)
    ]
    x = np.concatenate([np.stack(r) for r in rows], axis=1)
    return x.astype(dtype)
