"""Inputs and helpers of the bad-input corpus (tests/project/test_bad_inputs*.py)."""


import functools

import jax
import jax.numpy as jnp
import pytest

import eqx_quant as eqq
from eqx_quant import nn as qnn

L = eqq.QuantizeLayout
X = jnp.ones((32, 64), jnp.float32)
W = jnp.ones((64, 48), jnp.float32)
W3 = jnp.ones((3, 64, 8), jnp.float32)  # (G, K, N) experts
SIZES = jnp.asarray([10, 0, 22], jnp.int32)  # sums to X.shape[0]
CQ = eqq.CurrentScaleQuantizer()
MX = eqq.BlockScaleQuantizer()
SR = eqq.NVFP4Quantizer(stochastic_rounding=True)
NV = eqq.NVFP4Quantizer()
QS = eqq.DenseQuantizers(CQ, CQ, CQ)
KEY = jax.random.key(0)

DTYPES = r"float32, float16 or bfloat16"
SIZES_CHECK = r"group_sizes must be non-negative and sum to x.shape\[0\] = 32, got "


def sizes_check(operand: str) -> str:
    """The group-size message's words for the token matrix `operand` (eager and jit)."""
    return SIZES_CHECK.replace("x.shape", f"{operand}.shape")
GEMM_OUT = r"out_dtype must be one of \('float32', 'bfloat16', 'float16'\)"
NOT_RECIPE = r"recipe must be an eqx_quant.nn recipe \(DelayedScaling\(\), .*\) or None .*got str"


# Quantized operands, built on first use (each compiles once).
@functools.cache
def tx():
    return eqq.quantize(X, CQ)


@functools.cache
def tw():
    return eqq.quantize(W, CQ)


@functools.cache
def gx():
    return eqq.grouped_quantize(X, SIZES, CQ)


@functools.cache
def experts(shape=(3, 64, 8), quantizer=CQ):
    return jax.vmap(lambda w: eqq.quantize(w, quantizer))(jnp.ones(shape, jnp.float32))


def linear(recipe=None):
    return qnn.Linear(4, 8, recipe=recipe or qnn.CurrentScaling(), key=KEY)


def grouped_linear():
    return qnn.GroupedLinear(3, 4, 8, recipe=qnn.CurrentScaling(), key=KEY)


def case(id, fn, exc, regex, marks=()):
    return pytest.param(fn, exc, regex, id=id, marks=marks)
