"""A corpus of bad inputs across the public API: each case is (callable, expected exception
type, regex), and the regex asserts the message's key phrases: the function and argument it
names, what came, and the fix. (The per-format error tests, tests/*/test_*errors*.py, go deeper
into each family; this corpus spans the API in one table.)

Cases marked "unclear message" raise the right type but their text misses the argument, what
came or the fix; they pin the current text so that a change shows up here.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from tests.support.bad_inputs import (  # noqa: F401
    CQ,
    DTYPES,
    GEMM_OUT,
    KEY,
    MX,
    NOT_RECIPE,
    NV,
    QS,
    SIZES,
    SIZES_CHECK,
    SR,
    W3,
    L,
    W,
    X,
    case,
    experts,
    grouped_linear,
    gx,
    linear,
    sizes_check,
    tw,
    tx,
)

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
         rf"grouped_quantize_dbias: {sizes_check('dx')}\[33\] \(sum 33\)\. .*pass check=False"),
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
         rf"grouped_dbias: {sizes_check('grad')}\[1, 2\] \(sum 3\)\. .*pass check=False"),
    case("grouped_dbias-eager-sizes-negative",
         lambda: eqq.grouped_dbias(X, jnp.asarray([40, -8], jnp.int32)), ValueError,
         rf"grouped_dbias: {sizes_check('grad')}\[40, -8\] \(sum 32\)"),
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
]


@pytest.mark.parametrize("fn, error, regex", CASES)
def test_bad_input(fn, error, regex):
    with pytest.raises(error, match=regex):
        jax.block_until_ready(fn())


def test_corpus_size():
    from tests.project.test_bad_inputs_layers import CASES as LAYER_CASES

    cases = CASES + LAYER_CASES
    assert len(cases) >= 40
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids), "duplicate case ids"
