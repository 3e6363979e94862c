"""A corpus of bad inputs across the public API: each case is (callable, expected exception
type, regex), and the regex asserts the message's key phrases: the function and argument it
names, what came, and the fix. (The per-format error tests, tests/*/test_*errors*.py, go deeper
into each family; this corpus spans the API in one table.)

Cases marked "unclear message" raise the right type but their text misses the argument, what
came or the fix; they pin the current text so that a change shows up here. Cases marked xfail
are library bugs: the expected, clear message is asserted and does not come.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
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


def bug(reason):
    """A library bug: the clear message is asserted and does not come (pytest.raises' match
    fails with AssertionError)."""
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)




def case(id, fn, exc, regex, marks=()):
    return pytest.param(fn, exc, regex, id=id, marks=marks)


CASES = [
    # ---- quantize / quantize_dbias ---------------------------------------------------------
    case("quantize-int8-x", lambda: eqq.quantize(jnp.ones((4, 8), jnp.int8), CQ), TypeError,
         rf"quantize: x must be {DTYPES}, got dtype int8 with shape \(4, 8\)\. Cast it first, "
         r"e\.g\. x\.astype\(jnp\.bfloat16\)"),
    case("quantize-bool-x", lambda: eqq.quantize(jnp.ones((4, 8), bool), CQ), TypeError,
         rf"quantize: x must be {DTYPES}, got dtype bool .*astype"),
    case("quantize-complex-x", lambda: eqq.quantize(jnp.ones((4, 8), jnp.complex64), CQ),
         TypeError, rf"quantize: x must be {DTYPES}, got dtype complex64 .*astype"),
    case("quantize-list-x", lambda: eqq.quantize([[1.0]], CQ), TypeError,
         r"quantize: x must be a jax.Array, got list\. Use jnp\.asarray\(x\)"),
    case("quantize-numpy-scalar-x", lambda: eqq.quantize(np.float32(1), CQ), TypeError,
         r"quantize: x must be a jax.Array, got float32\. Use jnp\.asarray\(x\)"),
    case("quantize-flatten_axis-str", lambda: eqq.quantize(X, CQ, flatten_axis="1"), TypeError,
         r"quantize: flatten_axis must be an int, got '1'"),
    case("quantize-flatten_axis-bool", lambda: eqq.quantize(X, CQ, flatten_axis=True), TypeError,
         r"quantize: flatten_axis must be an int, got True"),
    case("quantize-amax_axes-list-of-ints", lambda: eqq.quantize(X, CQ, amax_axes=[0]), TypeError,
         r"quantize: amax_axes must be a tuple of mesh axis names, got \[0\]\. "
         r"Write amax_axes=\('tp',\)"),
    case("quantize-amax_axes-int", lambda: eqq.quantize(X, CQ, amax_axes=3), TypeError,
         r"quantize: amax_axes must be a tuple of mesh axis names, got 3",
         ),
    case("quantize-impl-None", lambda: eqq.quantize(X, CQ, impl=None), ValueError,
         r"quantize: impl must be 'auto', 'ffi' or 'reference', got None"),
    case("quantize-quantizer-class-not-instance",
         lambda: eqq.quantize(X, eqq.CurrentScaleQuantizer), TypeError,
         r"quantize: quantizer must be an eqx_quant quantizer \(e\.g\. "
         r"eqx_quant\.CurrentScaleQuantizer\(\)\), got _ModuleMeta"),
    case("quantize-key-without-sr", lambda: eqq.quantize(X, CQ, key=KEY), ValueError,
         r"quantize: key was given but CurrentScaleQuantizer does not use stochastic rounding\. "
         r"Drop key, or use NVFP4Quantizer\(stochastic_rounding=True\)"),
    case("quantize-sr-without-key", lambda: eqq.quantize(X, SR), ValueError,
         r"quantize: NVFP4Quantizer\(stochastic_rounding=True\) needs random bits: "
         r"pass key=jax\.random\.key\(seed\)"),
    case("quantize-sr-int-key", lambda: eqq.quantize(X, SR, key=0), TypeError,
         r"quantize: key must be a jax\.random\.key, got int"),
    case("quantize-mxfp8-colwise-1d", lambda: eqq.quantize(jnp.ones((64,)), MX), ValueError,
         r"quantize: BlockScaleQuantizer with q_layout=ROWWISE_COLWISE .* flatten_axis resolves "
         r"to 0 for x of shape \(64,\)\. Pass flatten_axis >= 1 .* or use QuantizeLayout\.ROWWISE"),
    case("quantize-rht-axis-not-16",
         lambda: eqq.quantize(jnp.ones((20, 32)), eqq.NVFP4Quantizer(use_rht=True)), ValueError,
         r"use_rht=True\) transforms groups of 16 along axis 0 .* length is 20 .*x\.shape=\(20, "
         r"32\).* Pad that axis to a multiple of 16 or use use_rht=False"),
    case("quantize_dbias-int32-dx", lambda: eqq.quantize_dbias(jnp.ones((4, 8), jnp.int32), CQ),
         TypeError, rf"quantize_dbias: x must be {DTYPES}, got dtype int32 .*astype"),
    case("quantize_dbias-numpy-dx", lambda: eqq.quantize_dbias(np.ones((4, 8), np.float32), CQ),
         TypeError, r"quantize_dbias: x must be a jax.Array, got ndarray\. Use jnp\.asarray"),
    case("quantize_dbias-scalar", lambda: eqq.quantize_dbias(jnp.float32(1), CQ), ValueError,
         r"quantize_dbias: x must have at least one dimension, got a scalar\. "
         r"Use x\.reshape\(1\)"),
    case("quantize_dbias-flatten_axis-out-of-range",
         lambda: eqq.quantize_dbias(X, CQ, flatten_axis=5), ValueError,
         r"quantize_dbias: flatten_axis=5 is out of range for x of rank 2 \(shape \(32, 64\)\); "
         r"it must be in \[-2, 1\]"),
    case("quantize_dbias-key-without-sr", lambda: eqq.quantize_dbias(X, CQ, key=KEY), ValueError,
         r"quantize_dbias: key was given but CurrentScaleQuantizer does not use stochastic "
         r"rounding\. Drop key"),
    case("quantize_dbias-sr-without-key", lambda: eqq.quantize_dbias(X, SR), ValueError,
         r"quantize_dbias: NVFP4Quantizer\(stochastic_rounding=True\) needs random bits: "
         r"pass key="),
    case("quantize_dbias-quantizer-None", lambda: eqq.quantize_dbias(X, None), TypeError,
         r"quantize_dbias: quantizer must be an eqx_quant quantizer .*got NoneType"),
    case("quantize_dbias-impl", lambda: eqq.quantize_dbias(X, CQ, impl="tpu"), ValueError,
         r"quantize_dbias: impl must be 'auto', 'ffi' or 'reference', got 'tpu'"),
    case("quantize_dbias-amax_axes-None", lambda: eqq.quantize_dbias(X, CQ, amax_axes=None),
         TypeError, r"quantize_dbias: amax_axes must be a tuple of mesh axis names, got None",
         ),
    # ---- grouped_quantize / grouped_quantize_dbias / grouped_dbias -------------------------
    case("grouped_quantize-sizes-float32",
         lambda: eqq.grouped_quantize(X, jnp.asarray([32.0]), CQ), TypeError,
         r"grouped_quantize: group_sizes must have dtype int32, got float32 \(shape \(1,\)\)\. "
         r"Use group_sizes\.astype\(jnp\.int32\)"),
    case("grouped_quantize-sizes-uint32",
         lambda: eqq.grouped_quantize(X, SIZES.astype(jnp.uint32), CQ), TypeError,
         r"grouped_quantize: group_sizes must have dtype int32, got uint32 .*astype\(jnp\.int32\)"),
    case("grouped_quantize-sizes-bool",
         lambda: eqq.grouped_quantize(X, jnp.asarray([True]), CQ), TypeError,
         r"grouped_quantize: group_sizes must have dtype int32, got bool"),
    case("grouped_quantize-sizes-numpy",
         lambda: eqq.grouped_quantize(X, np.array([32], np.int32), CQ), TypeError,
         r"grouped_quantize: group_sizes must be a jax.Array of int32, got ndarray\. "
         r"Use jnp\.asarray\(sizes, jnp\.int32\)"),
    case("grouped_quantize-sizes-2d",
         lambda: eqq.grouped_quantize(X, jnp.ones((2, 16), jnp.int32), CQ), ValueError,
         r"grouped_quantize: group_sizes must be 1-D with one entry per group \(G >= 1\), got "
         r"shape \(2, 16\)\. Under vmap, map over a leading axis"),
    case("grouped_quantize-eager-sizes-short-sum",
         lambda: eqq.grouped_quantize(X, jnp.asarray([10, 5], jnp.int32), CQ), ValueError,
         rf"grouped_quantize: {SIZES_CHECK}\[10, 5\] \(sum 15\)\. .*pass check=False"),
    case("grouped_quantize-eager-sizes-negative",
         lambda: eqq.grouped_quantize(X, jnp.asarray([40, -8], jnp.int32), MX), ValueError,
         rf"grouped_quantize: {SIZES_CHECK}\[40, -8\] \(sum 32\)\. .*pass check=False"),
    case("grouped_quantize-int32-x", lambda: eqq.grouped_quantize(X.astype(jnp.int32), SIZES, CQ),
         TypeError, rf"grouped_quantize: x must be {DTYPES}, got dtype int32 .*astype"),
    case("grouped_quantize-numpy-x",
         lambda: eqq.grouped_quantize(np.ones((32, 64), np.float32), SIZES, CQ), TypeError,
         r"grouped_quantize: x must be a jax.Array, got ndarray\. Use jnp\.asarray\(x\)"),
    case("grouped_quantize-flatten_axis-0", lambda: eqq.grouped_quantize(X, SIZES, CQ, 0),
         ValueError, r"grouped_quantize: flatten_axis resolves to 0 for x of shape \(32, 64\): "
         r".*flatten_axis must be >= 1 \(-1 is usual\)"),
    case("grouped_quantize-flatten_axis-float", lambda: eqq.grouped_quantize(X, SIZES, CQ, 1.0),
         TypeError, r"grouped_quantize: flatten_axis must be an int, got 1\.0"),
    case("grouped_quantize-check-str", lambda: eqq.grouped_quantize(X, SIZES, CQ, check="yes"),
         TypeError, r"(?s)parameter 'check'.*Actual value: 'yes'.*Expected type: <class 'bool'>"),
    case("grouped_quantize-key-without-sr",
         lambda: eqq.grouped_quantize(X, SIZES, CQ, key=KEY), ValueError,
         r"grouped_quantize: key was given but CurrentScaleQuantizer does not use stochastic "
         r"rounding\. Drop key"),
    case("grouped_quantize-sr-without-key", lambda: eqq.grouped_quantize(X, SIZES, SR), ValueError,
         r"grouped_quantize: NVFP4Quantizer\(stochastic_rounding=True\) needs random bits: "
         r"pass key=jax\.random\.key\(seed\)"),
    case("grouped_quantize-quantizer-str", lambda: eqq.grouped_quantize(X, SIZES, "mxfp8"),
         TypeError, r"grouped_quantize: quantizer must be an eqx_quant quantizer .*got str"),
    case("grouped_quantize-sizes-None-2d-x", lambda: eqq.grouped_quantize(X, None, CQ),
         ValueError, r"grouped_quantize: group_sizes=None means one group per leading index of a "
         r"weight-like x of shape \[G, K, N\] \(rank >= 3\), but x has shape \(32, 64\)\. "
         r"Pass group_sizes"),
    case("grouped_quantize_dbias-eager-sizes-long-sum",
         lambda: eqq.grouped_quantize_dbias(X, jnp.asarray([33], jnp.int32), CQ), ValueError,
         rf"grouped_quantize_dbias: {SIZES_CHECK}\[33\] \(sum 33\)\. .*pass check=False"),
    case("grouped_quantize_dbias-int8-dx",
         lambda: eqq.grouped_quantize_dbias(X.astype(jnp.int8), SIZES, CQ), TypeError,
         rf"grouped_quantize_dbias: x must be {DTYPES}, got dtype int8 .*astype"),
    case("grouped_quantize_dbias-key-without-sr",
         lambda: eqq.grouped_quantize_dbias(X, SIZES, MX, key=KEY), ValueError,
         r"grouped_quantize_dbias: key was given but BlockScaleQuantizer does not use stochastic"),
    case("grouped_quantize_dbias-sr-without-key",
         lambda: eqq.grouped_quantize_dbias(X, SIZES, SR), ValueError,
         r"grouped_quantize_dbias: NVFP4Quantizer\(stochastic_rounding=True\) needs random bits"),
    case("grouped_quantize_dbias-sizes-0d",
         lambda: eqq.grouped_quantize_dbias(X, jnp.asarray(32, jnp.int32), CQ), ValueError,
         r"grouped_quantize_dbias: group_sizes must be 1-D with one entry per group \(G >= 1\), "
         r"got shape \(\)"),
    case("grouped_quantize_dbias-flatten_axis-0",
         lambda: eqq.grouped_quantize_dbias(X, SIZES, CQ, 0), ValueError,
         r"grouped_quantize_dbias: flatten_axis resolves to 0 .*must be >= 1"),
    case("grouped_quantize_dbias-rht",
         lambda: eqq.grouped_quantize_dbias(X, SIZES, eqq.NVFP4Quantizer(use_rht=True)),
         ValueError, r"grouped_quantize_dbias: NVFP4Quantizer\(use_rht=True\) is not supported "
         r"for grouped inputs.* Use use_rht=False"),
    case("grouped_quantize_dbias-impl",
         lambda: eqq.grouped_quantize_dbias(X, SIZES, CQ, impl="cpu"), ValueError,
         r"grouped_quantize_dbias: impl must be 'auto', 'ffi' or 'reference', got 'cpu'"),
    case("grouped_dbias-eager-sizes-short-sum",
         lambda: eqq.grouped_dbias(X, jnp.asarray([1, 2], jnp.int32)), ValueError,
         rf"grouped_dbias: {SIZES_CHECK}\[1, 2\] \(sum 3\)\. .*pass check=False"),
    case("grouped_dbias-eager-sizes-negative",
         lambda: eqq.grouped_dbias(X, jnp.asarray([40, -8], jnp.int32)), ValueError,
         rf"grouped_dbias: {SIZES_CHECK}\[40, -8\] \(sum 32\)"),
    case("grouped_dbias-rank-1-grad", lambda: eqq.grouped_dbias(jnp.ones((32,)), SIZES),
         ValueError, r"grouped_dbias: grad must have rank >= 2 .*got shape \(32,\)\. "
         r"Use grad\.reshape\(M, 1\)"),
    case("grouped_dbias-int32-grad", lambda: eqq.grouped_dbias(X.astype(jnp.int32), SIZES),
         TypeError, rf"grouped_dbias: grad must be {DTYPES}, got int32"),
    case("grouped_dbias-sizes-list", lambda: eqq.grouped_dbias(X, [10, 22]), TypeError,
         r"grouped_dbias: group_sizes must be a jax.Array of int32, got list\. "
         r"Use jnp\.asarray\(sizes, jnp\.int32\)"),
    case("grouped_dbias-sizes-empty", lambda: eqq.grouped_dbias(X, jnp.zeros((0,), jnp.int32)),
         ValueError, r"grouped_dbias: group_sizes must be 1-D with one entry per group "
         r"\(G >= 1\), got shape \(0,\)"),
    case("grouped_dbias-sizes-None", lambda: eqq.grouped_dbias(X, None), ValueError,
         r"grouped_dbias: group_sizes=None means one group per leading index .*Pass group_sizes"),
    case("grouped_dbias-check-int", lambda: eqq.grouped_dbias(X, SIZES, check=1), TypeError,
         r"(?s)parameter 'check'.*Actual value: 1.*Expected type: <class 'bool'>"),
    # ---- gemm / grouped_gemm / grouped_wgrad -----------------------------------------------
    case("gemm-unquantized-arrays", lambda: eqq.gemm(X, W), TypeError,
         r"gemm: lhs must be a ScaledTensor or ScaledTensor1x \(the result of eqx_quant\.quantize"
         r"\), got ArrayImpl\. Quantize it first; for unquantized operands use "
         r"jax\.lax\.dot_general"),
    case("gemm-rhs-None", lambda: eqq.gemm(tx(), None), TypeError,
         r"gemm: rhs must be a ScaledTensor or ScaledTensor1x .*got NoneType\. Quantize it first"),
    case("gemm-grouped-lhs", lambda: eqq.gemm(gx(), tw()), TypeError,
         r"gemm: lhs must be a ScaledTensor or ScaledTensor1x .*got GroupedScaledTensor"),
    case("gemm-contracted-sizes-differ", lambda: eqq.gemm(tx(), eqq.quantize(X[:, :16], CQ)),
         ValueError, r"gemm: the contracted sizes differ: lhs dims \(1,\) of shape \(32, 64\) "
         r"have sizes \(64,\), rhs dims \(0,\) of shape \(32, 16\) have sizes \(32,\)"),
    case("gemm-contracting-dim-out-of-range",
         lambda: eqq.gemm(tx(), tw(), contracting_dims=((5,), (0,))), ValueError,
         r"gemm: lhs contracting dim 5 is not an int in \[-2, 1\] for a lhs operand of rank 2"),
    case("gemm-contracting-dims-flat", lambda: eqq.gemm(tx(), tw(), contracting_dims=(1, 0)),
         TypeError, r"gemm: contracting_dims must be a pair of sequences of ints, e\.g\. "
         r"\(\(-1,\), \(0,\)\); the lhs entry is 1"),
    case("gemm-out_dtype-int32", lambda: eqq.gemm(tx(), tw(), out_dtype=jnp.int32), ValueError,
         rf"gemm: {GEMM_OUT} \(None: lhs's original dtype\), got int32"),
    case("gemm-out_dtype-fp8", lambda: eqq.gemm(tx(), tw(), out_dtype=jnp.float8_e4m3fn),
         ValueError, rf"gemm: {GEMM_OUT} .*got float8_e4m3fn"),
    case("gemm-mixed-families", lambda: eqq.gemm(tx(), eqq.quantize(W, MX)), ValueError,
         r"gemm: lhs is CURRENT_TENSOR_SCALING and rhs is MXFP8_1D_SCALING; .*Quantize both "
         r"operands in one family"),
    case("grouped_gemm-dense-lhs", lambda: eqq.grouped_gemm(tx(), experts()), TypeError,
         r"grouped_gemm: lhs must be a GroupedScaledTensor \(the result of "
         r"eqx_quant\.grouped_quantize .*\), got ScaledTensor"),
    case("grouped_gemm-array-rhs", lambda: eqq.grouped_gemm(gx(), W3), TypeError,
         r"grouped_gemm: rhs must be a ScaledTensor holding one quantized weight per group, "
         r"e\.g\. jax\.vmap\(lambda w: eqx_quant\.quantize\(w, q\)\)\(weights\) .*got ArrayImpl"),
    case("grouped_gemm-unstacked-rhs", lambda: eqq.grouped_gemm(gx(), tw()), ValueError,
         r"grouped_gemm: rhs must stack 3 quantized 2-D weights \(one per group, a leading dim of "
         r"3 from jax\.vmap over the experts\); got leading dims \(\) and per-expert shape "
         r"\(64, 48\)"),
    case("grouped_gemm-experts-mismatch", lambda: eqq.grouped_gemm(gx(), experts((4, 64, 8))),
         ValueError, r"grouped_gemm: rhs must stack 3 quantized 2-D weights .*got leading dims "
         r"\(4,\)"),
    case("grouped_gemm-contracted-K-mismatch",
         lambda: eqq.grouped_gemm(gx(), experts((3, 32, 8))), ValueError,
         r"grouped_gemm: lhs has K = 64 but each expert's weight \(32, 8\) has 32 along "
         r"rhs_contracting=0"),
    case("grouped_gemm-rhs_contracting-2",
         lambda: eqq.grouped_gemm(gx(), experts(), rhs_contracting=2), ValueError,
         r"grouped_gemm: rhs_contracting is the dim of each expert's weight to contract: 0 for "
         r"\(K, N\) weights, 1 for \(N, K\); got 2"),
    case("grouped_gemm-out_dtype-int8",
         lambda: eqq.grouped_gemm(gx(), experts(), out_dtype=jnp.int8), ValueError,
         rf"grouped_gemm: {GEMM_OUT} .*got int8"),
    case("grouped_gemm-mixed-families",
         lambda: eqq.grouped_gemm(eqq.grouped_quantize(X, SIZES, MX), experts()), ValueError,
         r"grouped_gemm: lhs is MXFP8_1D_SCALING and rhs is CURRENT_TENSOR_SCALING; .*Quantize "
         r"both operands in one family"),
    case("grouped_wgrad-dense-x", lambda: eqq.grouped_wgrad(tx(), gx()), TypeError,
         r"grouped_wgrad: x must be a GroupedScaledTensor \(the result of "
         r"eqx_quant\.grouped_quantize\), got ScaledTensor"),
    case("grouped_wgrad-array-dy", lambda: eqq.grouped_wgrad(gx(), X), TypeError,
         r"grouped_wgrad: dy must be a GroupedScaledTensor .*got ArrayImpl"),
    case("grouped_wgrad-token-mismatch",
         lambda: eqq.grouped_wgrad(gx(), eqq.grouped_quantize(
             jnp.ones((16, 8)), jnp.asarray([8, 0, 8], jnp.int32), CQ)), ValueError,
         r"grouped_wgrad: x and dy must have the same tokens and groups: x \(32, 64\) in 3 "
         r"groups, dy \(16, 8\) in 3"),
    case("grouped_wgrad-eager-different-sizes",
         lambda: eqq.grouped_wgrad(gx(), eqq.grouped_quantize(
             jnp.ones((32, 8)), jnp.asarray([8, 2, 22], jnp.int32), CQ)),
         ValueError, r"grouped_wgrad: x and dy must be grouped by the same group_sizes, got "
         r"\[.*\] for x and \[8, 2, 22\] for dy"),
    case("grouped_wgrad-out_dtype-int32",
         lambda: eqq.grouped_wgrad(gx(), eqq.grouped_quantize(jnp.ones((32, 8)), SIZES, CQ),
                                   out_dtype=jnp.int32), ValueError,
         rf"grouped_wgrad: {GEMM_OUT} .*got int32"),
    case("grouped_wgrad-mixed-families",
         lambda: eqq.grouped_wgrad(gx(), eqq.grouped_quantize(jnp.ones((32, 8)), SIZES, MX)),
         ValueError, r"grouped_wgrad: x is CURRENT_TENSOR_SCALING and dy is MXFP8_1D_SCALING"),
    # ---- dense / grouped_dense -------------------------------------------------------------
    case("dense-missing-quantizers", lambda: eqq.dense(X, W), TypeError,
         r"dense\(x, kernel, bias=None, \*, quantizers, .*\): missing a required argument: "
         r"'quantizers'"),
    case("dense-quantizers-tuple", lambda: eqq.dense(X, W, quantizers=(CQ, CQ, CQ)), TypeError,
         r"dense: quantizers must be an eqx_quant\.DenseQuantizers\(x=\.\.\., kernel=\.\.\., "
         r"grad=\.\.\.\), got tuple"),
    case("dense-quantizers-field-str",
         lambda: eqq.dense(X, W, quantizers=eqq.DenseQuantizers("e4m3", CQ, CQ)), TypeError,
         r"dense \(quantizers\.x\): must be an eqx_quant quantizer, got str"),
    case("dense-grouped-delayed-quantizer",
         lambda: eqq.dense(X, W, quantizers=eqq.DenseQuantizers(
             eqq.GroupedDelayedScaleQuantizer(2), CQ, CQ)), TypeError,
         r"dense \(quantizers\.x\): a GroupedDelayedScaleQuantizer holds one scale per group .*"
         r"quantizer\.group\(g\)"),
    case("dense-contracted-sizes-differ",
         lambda: eqq.dense(X, jnp.ones((32, 48)), quantizers=QS), ValueError,
         r"dense: x's contracted dims \(64,\) differ from kernel's \(32,\) \(x \(32, 64\), "
         r"kernel \(32, 48\), contracting_dims \(\(-1,\), \(0,\)\)\)"),
    case("dense-int32-x", lambda: eqq.dense(X.astype(jnp.int32), W, quantizers=QS), TypeError,
         rf"dense: x must be a {DTYPES} jax\.Array, got ArrayImpl of dtype int32"),
    case("dense-int32-kernel", lambda: eqq.dense(X, W.astype(jnp.int32), quantizers=QS),
         TypeError, rf"dense: kernel must be a {DTYPES} jax\.Array, got ArrayImpl of dtype int32"),
    case("dense-numpy-x", lambda: eqq.dense(np.ones((32, 64), np.float32), W, quantizers=QS),
         TypeError, rf"dense: x must be a {DTYPES} jax\.Array, got ndarray of dtype float32"),
    case("dense-bias-shape", lambda: eqq.dense(X, W, jnp.ones((7,)), quantizers=QS), ValueError,
         r"dense: bias must have the kernel's output shape \(48,\), got \(7,\)"),
    case("dense-bias-int32", lambda: eqq.dense(X, W, jnp.ones((48,), jnp.int32), quantizers=QS),
         TypeError, rf"dense: bias must be a {DTYPES} jax\.Array, got ArrayImpl of dtype int32"),
    case("dense-rank-1-kernel", lambda: eqq.dense(X, jnp.ones((64,)), quantizers=QS), ValueError,
         r"dense: x \(32, 64\) needs at least one batch dim and kernel \(64,\) at least one output "
         r"dim besides the 1 contracted ones\. Reshape x to \(1, \.\.\.\) or the kernel to "
         r"\(\.\.\., 1\)"),
    case("dense-contracting-dims-flat",
         lambda: eqq.dense(X, W, quantizers=QS, contracting_dims=(1, 0)), TypeError,
         r"dense: contracting_dims must be a pair \(x_dims, kernel_dims\) of int sequences, "
         r"e\.g\. \(\(-1,\), \(0,\)\) .*got \(1, 0\)"),
    case("dense-contracting-dims-leading-x",
         lambda: eqq.dense(X, W, quantizers=QS, contracting_dims=((0,), (0,))), ValueError,
         r"dense: contracting_dims \(\(0,\), \(0,\)\) must be x's trailing n dims .*: "
         r"\(\(-1,\), \(0,\)\) for a \(K, N\) kernel, \(\(-1,\), \(1,\)\) for an \(N, K\) one"),
    case("dense-key-without-sr", lambda: eqq.dense(X, W, quantizers=QS, key=KEY), ValueError,
         r"dense: key was given but no quantizer rounds stochastically\. Drop key"),
    case("dense-sr-without-key",
         lambda: eqq.dense(X, W, quantizers=eqq.DenseQuantizers(NV, SR, NV)), ValueError,
         r"dense: quantizers\.kernel rounds stochastically and needs random bits: "
         r"pass key=jax\.random\.key\(seed\)"),
    case("dense-impl", lambda: eqq.dense(X, W, quantizers=QS, impl="gpu"), ValueError,
         r"dense: impl must be 'auto', 'ffi' or 'reference', got 'gpu'"),
    case("dense-amax_axes-str", lambda: eqq.dense(X, W, quantizers=QS, amax_axes="tp"),
         TypeError, r"dense: amax_axes must be a tuple of mesh axis names, got 'tp'\. Write "
         r"amax_axes=\('tp',\) rather than amax_axes='tp'"),
    case("dense-amax_axes-int", lambda: eqq.dense(X, W, quantizers=QS, amax_axes=3), TypeError,
         r"dense: amax_axes must be a tuple of mesh axis names, got 3"),
    case("dense-mixed-quantizer-families",
         lambda: eqq.dense(X, W, quantizers=eqq.DenseQuantizers(MX, CQ, CQ)), ValueError,
         r"dense: quantizers\.x is MXFP8_1D_SCALING and quantizers\.kernel is "
         r"CURRENT_TENSOR_SCALING; .*Quantize both operands in one family"),
    case("grouped_dense-missing-quantizers", lambda: eqq.grouped_dense(X, W3, SIZES), TypeError,
         r"grouped_dense\(x, kernel, group_sizes, bias=None, \*, quantizers, .*\): missing a "
         r"required argument: 'quantizers'"),
    case("grouped_dense-sizes-float32",
         lambda: eqq.grouped_dense(X, W3, SIZES.astype(jnp.float32), quantizers=QS), TypeError,
         r"grouped_dense: group_sizes must have dtype int32, got float32 \(shape \(3,\)\)\. "
         r"Use group_sizes\.astype\(jnp\.int32\)"),
    case("grouped_dense-sizes-list", lambda: eqq.grouped_dense(X, W3, [10, 0, 22], quantizers=QS),
         TypeError, r"grouped_dense: group_sizes must be a jax.Array of int32, got list"),
    case("grouped_dense-sizes-2d",
         lambda: eqq.grouped_dense(X, W3, SIZES.reshape(1, 3), quantizers=QS), ValueError,
         r"grouped_dense: group_sizes must be 1-D with one entry per group \(G >= 1\), got shape "
         r"\(1, 3\)"),
    case("grouped_dense-eager-bad-sizes",
         lambda: eqq.grouped_dense(X, W3, jnp.asarray([1, 2, 3], jnp.int32), quantizers=QS),
         ValueError, rf"grouped_dense: {SIZES_CHECK}\[1, 2, 3\] \(sum 6\)\. .*check=False"),
    case("grouped_dense-2d-kernel", lambda: eqq.grouped_dense(X, W, SIZES, quantizers=QS),
         ValueError, r"grouped_dense: x must be \(tokens, K\) and kernel \(G, K, N\), got "
         r"x \(32, 64\) and kernel \(64, 48\)"),
    case("grouped_dense-contracted-K-mismatch",
         lambda: eqq.grouped_dense(X, W3[:, :32], SIZES, quantizers=QS), ValueError,
         r"grouped_dense: x must be \(tokens, K\) and kernel \(G, K, N\), got x \(32, 64\) and "
         r"kernel \(3, 32, 8\)"),
    case("grouped_dense-3d-x", lambda: eqq.grouped_dense(jnp.ones((2, 16, 64)), W3, SIZES,
                                                         quantizers=QS), ValueError,
         r"grouped_dense: x must be \(tokens, K\) .*got x \(2, 16, 64\)"),
    case("grouped_dense-experts-mismatch",
         lambda: eqq.grouped_dense(X, jnp.ones((4, 64, 8)), SIZES, quantizers=QS), ValueError,
         r"grouped_dense: kernel holds 4 experts but group_sizes has 3 groups"),
    case("grouped_dense-bias-shape", lambda: eqq.grouped_dense(X, W3, SIZES, jnp.ones((8,)),
                                                               quantizers=QS), ValueError,
         r"grouped_dense: bias must be \(G, N\) = \(3, 8\), got \(8,\)"),
    case("grouped_dense-int32-x",
         lambda: eqq.grouped_dense(X.astype(jnp.int32), W3, SIZES, quantizers=QS), TypeError,
         rf"grouped_dense: x must be a {DTYPES} jax\.Array, got ArrayImpl of dtype int32"),
    case("grouped_dense-int32-kernel",
         lambda: eqq.grouped_dense(X, W3.astype(jnp.int32), SIZES, quantizers=QS), TypeError,
         rf"grouped_dense: kernel must be a {DTYPES} jax\.Array, got ArrayImpl of dtype int32"),
    case("grouped_dense-key-without-sr",
         lambda: eqq.grouped_dense(X, W3, SIZES, quantizers=QS, key=KEY), ValueError,
         r"grouped_dense: key was given but no quantizer rounds stochastically\. Drop key"),
    case("grouped_dense-quantizers-tuple",
         lambda: eqq.grouped_dense(X, W3, SIZES, quantizers=(CQ, CQ, CQ)), TypeError,
         r"grouped_dense: quantizers must be an eqx_quant\.DenseQuantizers\(x=\.\.\., "
         r"kernel=\.\.\., grad=\.\.\.\), got tuple"),
    case("grouped_dense-unstacked-delayed-kernel",
         lambda: eqq.grouped_dense(X, W3, SIZES, quantizers=eqq.DenseQuantizers(
             CQ, eqq.DelayedScaleQuantizer(), CQ)), ValueError,
         r"grouped_dense \(quantizers\.kernel\): a DelayedScaleQuantizer for the experts must "
         r"hold one state per expert \(scale of shape \(3, 1\)\), got scale of shape \(1,\)\. "
         r"Build it with jax\.vmap"),
    # ---- quantizer constructors and dequantize ---------------------------------------------
    case("CurrentScaleQuantizer-q_dtype-float16", lambda: eqq.CurrentScaleQuantizer("float16"),
         TypeError, r"CurrentScaleQuantizer: q_dtype must be jnp\.float8_e4m3fn or "
         r"jnp\.float8_e5m2 for per-tensor FP8 scaling, got 'float16'\. For FP4 use "
         r"NVFP4Quantizer; for block-scaled FP8 use BlockScaleQuantizer"),
    case("CurrentScaleQuantizer-q_layout-int", lambda: eqq.CurrentScaleQuantizer(q_layout=2),
         TypeError, r"CurrentScaleQuantizer: q_layout must be an eqx_quant\.QuantizeLayout "
         r"\(e\.g\. QuantizeLayout\.ROWWISE_COLWISE\), got 2"),
    case("DelayedScaleQuantizer-scale-python-float",
         lambda: eqq.DelayedScaleQuantizer(scale=2.0), TypeError,
         r"DelayedScaleQuantizer: scale must be a float32 jax\.Array, got a Python float \(2\.0\)"
         r"\. Pass jnp\.asarray\(\.\.\., jnp\.float32\)"),
    case("DelayedScaleQuantizer-scale-int32",
         lambda: eqq.DelayedScaleQuantizer(scale=jnp.ones((1,), jnp.int32)), TypeError,
         r"DelayedScaleQuantizer: scale must be a float32 jax\.Array, got ArrayImpl of dtype "
         r"int32\. Pass jnp\.asarray\(\.\.\., jnp\.float32\)"),
    case("DelayedScaleQuantizer-scale-0d",
         lambda: eqq.DelayedScaleQuantizer(scale=jnp.float32(2.0)), ValueError,
         r"DelayedScaleQuantizer: scale must have shape \(1,\), got \(\)"),
    case("DelayedScaleQuantizer-margin-negative", lambda: eqq.DelayedScaleQuantizer(margin=-1),
         ValueError, r"DelayedScaleQuantizer: margin must be a finite float >= 0 .*got -1"),
    case("DelayedScaleQuantizer-margin-str", lambda: eqq.DelayedScaleQuantizer(margin="1"),
         ValueError, r"DelayedScaleQuantizer: margin must be a finite float >= 0 .*got '1'"),
    case("DelayedScaleQuantizer-amax_history_len-float",
         lambda: eqq.DelayedScaleQuantizer(amax_history_len=2.5), ValueError,
         r"DelayedScaleQuantizer: amax_history_len must be an int >= 1, got 2\.5"),
    case("DelayedScaleQuantizer-amax_history-2d",
         lambda: eqq.DelayedScaleQuantizer(amax_history=jnp.zeros((2, 2))), ValueError,
         r"DelayedScaleQuantizer: amax_history must have shape \(2,\), got \(2, 2\)\. "
         r"amax_history_len must equal len\(amax_history\)"),
    case("DelayedScaleQuantizer-amax_compute_algo-None",
         lambda: eqq.DelayedScaleQuantizer(amax_compute_algo=None), ValueError,
         r"DelayedScaleQuantizer: amax_compute_algo must be 'max' or 'most_recent', got None"),
    case("DelayedScaleQuantizer.update-numpy-amax",
         lambda: eqq.DelayedScaleQuantizer(amax_history_len=2).update(np.ones(1, np.float32)),
         ValueError, r"DelayedScaleQuantizer\.update: amax must be a jax\.Array of shape \(1,\), "
         r"got a numpy\.ndarray of shape \(1,\)\. Pass the quantized tensor's \.amax"),
    case("BlockScaleQuantizer-q_dtype-int8", lambda: eqq.BlockScaleQuantizer(jnp.int8), TypeError,
         r"BlockScaleQuantizer: q_dtype must be jnp\.float8_e4m3fn or jnp\.float8_e5m2 \(MXFP8\), "
         r"got 'int8'\. For FP4 use NVFP4Quantizer"),
    case("BlockScaleQuantizer-q_dtype-short-name", lambda: eqq.BlockScaleQuantizer("e4m3"),
         TypeError, r"BlockScaleQuantizer: q_dtype must be .*got 'e4m3'"),
    case("BlockScaleQuantizer-q_layout-str", lambda: eqq.BlockScaleQuantizer(q_layout="rowwise"),
         TypeError, r"BlockScaleQuantizer: q_layout must be an eqx_quant\.QuantizeLayout .*got "
         r"'rowwise'"),
    case("NVFP4Quantizer-stochastic_rounding-int",
         lambda: eqq.NVFP4Quantizer(stochastic_rounding=1), TypeError,
         r"NVFP4Quantizer: stochastic_rounding must be a bool, got 1"),
    case("NVFP4Quantizer-use_rht-str", lambda: eqq.NVFP4Quantizer(use_rht="yes"), TypeError,
         r"NVFP4Quantizer: use_rht must be a bool, got 'yes'"),
    case("NVFP4Quantizer-q_layout-str", lambda: eqq.NVFP4Quantizer(q_layout="colwise"), TypeError,
         r"NVFP4Quantizer: q_layout must be an eqx_quant\.QuantizeLayout .*got 'colwise'"),
    case("GroupedDelayedScaleQuantizer-num_groups-float",
         lambda: eqq.GroupedDelayedScaleQuantizer(2.0), ValueError,
         r"GroupedDelayedScaleQuantizer: num_groups must be an int >= 1, got 2\.0"),
    case("GroupedDelayedScaleQuantizer-scale-python-float",
         lambda: eqq.GroupedDelayedScaleQuantizer(2, scale=1.0), ValueError,
         r"GroupedDelayedScaleQuantizer: scale must be a float32 array of shape \(num_groups,\) "
         r"= \(2,\), got float"),
    # unclear message: raised by GroupedDelayedScaleQuantizer but names DelayedScaleQuantizer.
    case("GroupedDelayedScaleQuantizer-margin-negative",
         lambda: eqq.GroupedDelayedScaleQuantizer(2, margin=-0.5), ValueError,
         r"DelayedScaleQuantizer: margin must be a finite float >= 0 .*got -0\.5"),
    case("ScaledTensor.dequantize-int32", lambda: tx().dequantize(dtype=jnp.int32), TypeError,
         rf"dequantize: dtype must be {DTYPES} \(or None for the original dtype\), got int32"),
    case("ScaledTensor.dequantize-fp8", lambda: tx().dequantize(dtype=jnp.float8_e4m3fn),
         TypeError, rf"dequantize: dtype must be {DTYPES} .*got float8_e4m3fn"),
    case("ScaledTensor1x.dequantize-int32", lambda: tx().rowwise.dequantize(dtype=jnp.int32),
         TypeError, rf"dequantize: dtype must be {DTYPES} .*got int32"),
    case("GroupedScaledTensor.dequantize-int32", lambda: gx().dequantize(dtype=jnp.int32),
         TypeError, rf"dequantize: dtype must be {DTYPES} .*got int32"),
    case("unswizzle_scales-tensor-scaling",
         lambda: eqq.unswizzle_scales(tx().rowwise.scale_inv, tx().rowwise), ValueError,
         r"unswizzle_scales: scales are swizzled only for block formats \(MXFP8, NVFP4\); this "
         r"part has CURRENT_TENSOR_SCALING"),
    # ---- eqx_quant.nn: recipes, layers, quantize_model -------------------------------------
    case("DelayedScaling-margin-negative", lambda: qnn.DelayedScaling(margin=-1), ValueError,
         r"DelayedScaling: margin must be a finite number >= 0 \(the scale is divided by "
         r"2\^margin\), got -1"),
    case("DelayedScaling-margin-nan", lambda: qnn.DelayedScaling(margin=float("nan")), ValueError,
         r"DelayedScaling: margin must be a finite number >= 0 .*got nan"),
    case("DelayedScaling-fp8_format-e5m2", lambda: qnn.DelayedScaling(fp8_format="e5m2"),
         ValueError, r"DelayedScaling: fp8_format must be 'hybrid' \(E4M3 forward, E5M2 "
         r"gradients\) or 'e4m3', got 'e5m2'"),
    case("DelayedScaling-amax_history_len-float",
         lambda: qnn.DelayedScaling(amax_history_len=2.5), ValueError,
         r"DelayedScaling: amax_history_len must be an int >= 1, got 2\.5"),
    case("DelayedScaling-amax_compute_algo", lambda: qnn.DelayedScaling(amax_compute_algo="mean"),
         ValueError, r"DelayedScaling: amax_compute_algo must be 'max' or 'most_recent', "
         r"got 'mean'"),
    case("CurrentScaling-fp8_format-uppercase", lambda: qnn.CurrentScaling(fp8_format="E4M3"),
         ValueError, r"CurrentScaling: fp8_format must be 'hybrid' .* or 'e4m3', got 'E4M3'"),
    case("NVFP4BlockScaling-rht-str", lambda: qnn.NVFP4BlockScaling(rht="no"), TypeError,
         r"NVFP4BlockScaling: rht must be a bool, got 'no'"),
    case("NVFP4BlockScaling-weight_2d-str", lambda: qnn.NVFP4BlockScaling(weight_2d="y"),
         TypeError, r"NVFP4BlockScaling: weight_2d must be a bool, got 'y'"),
    case("Linear-recipe-str", lambda: qnn.Linear(4, 8, recipe="fp8", key=KEY), TypeError,
         rf"eqx_quant\.nn\.Linear: {NOT_RECIPE}"),
    case("Linear-in_features-0", lambda: qnn.Linear(0, 8, recipe=qnn.CurrentScaling(), key=KEY),
         ValueError, r"eqx_quant\.nn\.Linear: in_features must be an int >= 1, got 0 "
         r"\(Equinox's 'scalar' is not supported: reshape to \(\.\.\., 1\)\)"),
    case("Linear-out_features-float",
         lambda: qnn.Linear(4, 8.0, recipe=qnn.CurrentScaling(), key=KEY), ValueError,
         r"eqx_quant\.nn\.Linear: out_features must be an int >= 1, got 8\.0"),
    case("Linear-int-dtype",
         lambda: qnn.Linear(4, 8, dtype=jnp.int32, recipe=qnn.CurrentScaling(), key=KEY),
         TypeError, r"eqx_quant\.nn\.Linear: dtype must be a floating dtype .* got int32"),
    case("Linear-int-key", lambda: qnn.Linear(4, 8, recipe=qnn.CurrentScaling(), key=3),
         TypeError, r"eqx_quant\.nn\.Linear: key must be a jax\.random\.key .* got int"),
    case("Linear-call-wrong-features", lambda: linear()(jnp.ones((3, 5))), ValueError,
         r"eqx_quant\.nn\.Linear: x must have shape \(\*batch, in_features\) = \(\*batch, 4\), "
         r"got \(3, 5\)"),
    case("Linear-call-int32-x", lambda: linear()(jnp.ones((3, 4), jnp.int32)), TypeError,
         rf"eqx_quant\.nn\.Linear: x must be a {DTYPES} jax\.Array, got ArrayImpl of dtype int32"),
    case("Linear-call-numpy-x", lambda: linear()(np.ones((3, 4), np.float32)), TypeError,
         rf"eqx_quant\.nn\.Linear: x must be a {DTYPES} jax\.Array, got ndarray"),
    case("Linear-call-sr-without-key",
         lambda: qnn.Linear(32, 32, recipe=qnn.NVFP4BlockScaling(), key=KEY)(jnp.ones((32, 32))),
         ValueError, r"eqx_quant\.nn\.Linear: quantizers\.grad rounds stochastically and needs "
         r"random bits: pass key=jax\.random\.key\(seed\), a new one per step"),
    case("Linear-call-int-key",
         lambda: qnn.Linear(32, 32, recipe=qnn.NVFP4BlockScaling(), key=KEY)(
             jnp.ones((32, 32)), key=1), TypeError,
         r"eqx_quant\.nn\.Linear: key must be a jax\.random\.key, got int"),
    case("GroupedLinear-num_groups-0",
         lambda: qnn.GroupedLinear(0, 4, 8, recipe=qnn.CurrentScaling(), key=KEY), ValueError,
         r"eqx_quant\.nn\.GroupedLinear: num_groups must be an int >= 1, got 0"),
    case("GroupedLinear-in_features-0",
         lambda: qnn.GroupedLinear(3, 0, 8, recipe=qnn.CurrentScaling(), key=KEY), ValueError,
         r"eqx_quant\.nn\.GroupedLinear: in_features must be an int >= 1, got 0"),
    case("GroupedLinear-recipe-str", lambda: qnn.GroupedLinear(3, 4, 8, recipe="x", key=KEY),
         TypeError, rf"eqx_quant\.nn\.GroupedLinear: {NOT_RECIPE}"),
    case("GroupedLinear-call-sizes-float32",
         lambda: grouped_linear()(jnp.ones((6, 4)), jnp.asarray([2.0, 2.0, 2.0])), TypeError,
         r"grouped_dense: group_sizes must have dtype int32, got float32 .*astype\(jnp\.int32\)"),
    case("GroupedLinear-call-wrong-group-count",
         lambda: grouped_linear()(jnp.ones((6, 4)), jnp.asarray([2, 2, 1, 1], jnp.int32)),
         ValueError, r"grouped_dense: kernel holds 3 experts but group_sizes has 4 groups"),
    case("GroupedLinear-call-wrong-features",
         lambda: grouped_linear()(jnp.ones((6, 5)), jnp.asarray([2, 2, 2], jnp.int32)),
         ValueError, r"grouped_dense: x must be \(tokens, K\) and kernel \(G, K, N\), got "
         r"x \(6, 5\) and kernel \(3, 4, 8\)"),
    case("GroupedLinear-call-eager-bad-sizes",
         lambda: grouped_linear()(jnp.ones((6, 4)), jnp.asarray([2, 2, 3], jnp.int32)),
         ValueError, r"grouped_dense: group_sizes must be non-negative and sum to x\.shape\[0\] "
         r"= 6, got \[2, 2, 3\] \(sum 7\)"),
    case("GroupedLinear-call-int32-x",
         lambda: grouped_linear()(jnp.ones((6, 4), jnp.int32), jnp.asarray([2, 2, 2], jnp.int32)),
         TypeError, rf"grouped_dense: x must be a {DTYPES} jax\.Array, got ArrayImpl of dtype "
         r"int32"),
    # unclear message: raised for MLP(recipe=...) but names eqx_quant.nn.Linear.from_linear.
    case("MLP-recipe-str", lambda: qnn.MLP(4, 4, 8, 1, recipe="fp8", key=KEY), TypeError,
         rf"eqx_quant\.nn\.MLP: {NOT_RECIPE}"),
    case("quantize_model-recipe-str",
         lambda: qnn.quantize_model(eqx.nn.Linear(4, 8, key=KEY), "fp8"), TypeError,
         rf"quantize_model: {NOT_RECIPE}"),
    case("quantize_model-recipe-fn-returns-str",
         lambda: qnn.quantize_model(eqx.nn.Linear(4, 8, key=KEY), lambda path, lin: "fp8"),
         TypeError, rf"quantize_model \(recipe for .*\): {NOT_RECIPE}"),
    case("quantize_model-filter_fn-str",
         lambda: qnn.quantize_model(eqx.nn.Linear(4, 8, key=KEY), qnn.CurrentScaling(),
                                    filter_fn="x"), TypeError,
         r"quantize_model: filter_fn must be a function \(path, linear\) -> bool, got str"),
]


@pytest.mark.parametrize("fn, error, regex", CASES)
def test_bad_input(fn, error, regex):
    with pytest.raises(error, match=regex):
        jax.block_until_ready(fn())


def test_corpus_size():
    assert len(CASES) >= 40
    ids = [c.id for c in CASES]
    assert len(set(ids)) == len(ids), "duplicate case ids"
