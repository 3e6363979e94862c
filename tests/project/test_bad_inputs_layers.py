"""The bad-input corpus, second half: dense / grouped_dense, the quantizer constructors and
dequantize, and eqx_quant.nn (recipes, layers, quantize_model). Same form as
tests/project/test_bad_inputs.py."""


import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from eqx_quant import nn as qnn
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
    tw,
    tx,
)

CASES = [
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
         r"unswizzle_scales: GEMM-ready scales exist only for block formats \(MXFP8, NVFP4, FP8 "
         r"block\); this part has CURRENT_TENSOR_SCALING"),
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
