"""Bad input to the block formats raises a clear error naming the argument and the fix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq

L = eqq.QuantizeLayout
X = jnp.ones((32, 64), jnp.float32)


def test_nvfp4_rejects_other_q_dtype():
    with pytest.raises(
        TypeError,
        match=r"q_dtype must be jnp.float4_e2m1fn, got 'float8_e4m3fn'.*BlockScaleQuantizer",
    ):
        eqq.NVFP4Quantizer(q_dtype=jnp.float8_e4m3fn)


def test_mxfp8_rejects_fp4():
    with pytest.raises(
        TypeError,
        match=r"BlockScaleQuantizer: q_dtype must be .*got 'float4_e2m1fn'.*NVFP4Quantizer",
    ):
        eqq.BlockScaleQuantizer(jnp.float4_e2m1fn)


def test_tensor_quantizer_rejects_fp4():
    with pytest.raises(TypeError, match=r"For FP4 use NVFP4Quantizer"):
        eqq.CurrentScaleQuantizer(jnp.float4_e2m1fn)


def test_rht_with_2d():
    with pytest.raises(ValueError, match=r"use_rht=True needs use_2d=False"):
        eqq.NVFP4Quantizer(use_rht=True, use_2d=True)


def test_rht_without_colwise():
    with pytest.raises(ValueError, match=r"colwise part only.*ROWWISE has none"):
        eqq.NVFP4Quantizer(q_layout=L.ROWWISE, use_rht=True)


@pytest.mark.parametrize("mask", [-1, 1 << 16, 1.5, True])
def test_rht_mask(mask):
    with pytest.raises(ValueError, match=r"rht_sign_mask must be a 16-bit int"):
        eqq.NVFP4Quantizer(use_rht=True, rht_sign_mask=mask)


def test_flag_types():
    with pytest.raises(TypeError, match=r"use_2d must be a bool, got 1"):
        eqq.NVFP4Quantizer(use_2d=1)


def test_key_missing_with_sr():
    q = eqq.NVFP4Quantizer(stochastic_rounding=True)
    with pytest.raises(
        ValueError, match=r"stochastic_rounding=True\) needs random bits: pass key=jax.random.key"
    ):
        eqq.quantize(X, q)


@pytest.mark.parametrize(
    "q", [eqq.NVFP4Quantizer(), eqq.BlockScaleQuantizer(), eqq.CurrentScaleQuantizer()]
)
def test_key_without_sr(q):
    with pytest.raises(ValueError, match=r"key was given but .* does not use stochastic rounding"):
        eqq.quantize(X, q, key=jax.random.key(0))


def test_key_of_other_generator():
    q = eqq.NVFP4Quantizer(stochastic_rounding=True)
    key = jax.random.key(0, impl="rbg")
    with pytest.raises(TypeError, match=r"scalar threefry key .*shape \(4,\)"):
        eqq.quantize(X, q, key=key)


def test_key_batch_outside_vmap():
    q = eqq.NVFP4Quantizer(stochastic_rounding=True)
    with pytest.raises(TypeError, match=r"scalar threefry key"):
        eqq.quantize(X, q, key=jax.random.split(jax.random.key(0), 3))


def test_rht_needs_multiple_of_16():
    q = eqq.NVFP4Quantizer(use_rht=True)
    x = jnp.ones((24, 64), jnp.float32)
    with pytest.raises(
        ValueError, match=r"groups of 16 along axis 0 .*length is 24.*use_rht=False"
    ):
        eqq.quantize(x, q)


@pytest.mark.parametrize(
    "q", [eqq.BlockScaleQuantizer(), eqq.NVFP4Quantizer(q_layout=L.ROWWISE, use_2d=True)]
)
def test_colwise_blocks_need_an_axis(q):
    with pytest.raises(ValueError, match=r"flatten_axis resolves to 0 .*flatten_axis >= 1"):
        eqq.quantize(jnp.ones((64,), jnp.float32), q)


def test_swizzle_of_tensor_scaling_rejected():
    t = eqq.quantize(X, eqq.CurrentScaleQuantizer())
    with pytest.raises(
        ValueError, match=r"gemm_scale_inv: GEMM-ready scales exist only for block formats"
    ):
        t.rowwise.gemm_scale_inv()


def test_unswizzle_shape_mismatch():
    t = eqq.quantize(X, eqq.BlockScaleQuantizer(q_layout=L.ROWWISE), impl="reference")
    with pytest.raises(ValueError, match=r"unswizzle_scales: swizzled has shape \(256, 4\), but "
                       r"scales of shape .* pad to \(128, 4\)"):
        eqq.unswizzle_scales(jnp.zeros((256, 4), jnp.float8_e8m0fnu), t.rowwise)


def test_unswizzle_dtype_mismatch():
    t = eqq.quantize(X, eqq.BlockScaleQuantizer(q_layout=L.ROWWISE), impl="reference")
    swizzled = t.rowwise.gemm_scale_inv()
    with pytest.raises(TypeError, match=r"swizzled must be a jax.Array of float8_e8m0fnu .*got "
                       r"ArrayImpl of dtype float32"):
        eqq.unswizzle_scales(swizzled.astype(jnp.float32), t.rowwise)
    with pytest.raises(TypeError, match=r"got ndarray"):
        eqq.unswizzle_scales(np.asarray(swizzled), t.rowwise)


def test_block_ops_off_cpu_and_cuda_need_reference():
    """impl='ffi' with no kernel for the platform is an error, never a silent fallback."""
    from eqx_quant._ops import _ffi

    assert "nvfp4_quantize" in _ffi.KERNEL_OPS
    with pytest.raises(RuntimeError, match=r"no kernel for 'bogus_op'|was not found|built without"):
        _ffi.require_kernels("cpu" if "cpu" in eqq.native_platforms() else "cuda", "bogus_op")


def test_numpy_key_rejected():
    q = eqq.NVFP4Quantizer(stochastic_rounding=True)
    with pytest.raises(TypeError):
        eqq.quantize(X, q, key=np.zeros(2, np.uint32))
