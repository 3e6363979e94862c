"""Bad input raises a clear TypeError/ValueError/RuntimeError naming the argument and the fix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from tests.support.bytes import u8

X = jnp.ones((4, 8), jnp.float32)
Q = eqq.CurrentScaleQuantizer()


@pytest.mark.parametrize("fn", [eqq.quantize, eqq.quantize_dbias])
def test_integer_input(fn):
    with pytest.raises(
        TypeError, match=r"x must be float32, float16 or bfloat16, got dtype int32 .*astype"
    ):
        fn(jnp.ones((4, 8), jnp.int32), Q)


def test_fp8_input_rejected():
    with pytest.raises(TypeError, match=r"got dtype float8_e4m3fn"):
        eqq.quantize(X.astype(jnp.float8_e4m3fn), Q)


def test_numpy_input_rejected():
    with pytest.raises(TypeError, match=r"x must be a jax.Array, got ndarray. Use jnp.asarray"):
        eqq.quantize(np.ones((4, 8), np.float32), Q)


def test_scalar_input_rejected():
    with pytest.raises(ValueError, match=r"at least one dimension.*reshape\(1\)"):
        eqq.quantize(jnp.float32(1.0), Q)


@pytest.mark.parametrize("fa", [2, -3, 7])
def test_flatten_axis_out_of_range(fa):
    with pytest.raises(
        ValueError, match=rf"flatten_axis={fa} is out of range for x of rank 2 .*\[-2, 1\]"
    ):
        eqq.quantize(X, Q, flatten_axis=fa)


def test_flatten_axis_type():
    with pytest.raises(TypeError, match="flatten_axis must be an int"):
        eqq.quantize(X, Q, flatten_axis=1.0)


def test_not_a_quantizer():
    with pytest.raises(TypeError, match=r"quantizer must be an eqx_quant quantizer .*got str"):
        eqq.quantize(X, "e4m3")


def test_amax_axes_string():
    with pytest.raises(TypeError, match=r"amax_axes=\('tp',\) rather than amax_axes='tp'"):
        eqq.quantize(X, Q, amax_axes="tp")


def test_bad_impl():
    with pytest.raises(ValueError, match=r"impl must be 'auto', 'ffi' or 'reference', got 'gpu'"):
        eqq.quantize(X, Q, impl="gpu")


@pytest.mark.parametrize("cls", [eqq.CurrentScaleQuantizer, eqq.DelayedScaleQuantizer])
@pytest.mark.parametrize("dtype", [jnp.int8, jnp.float4_e2m1fn, jnp.bfloat16])
def test_wrong_q_dtype(cls, dtype):
    with pytest.raises(
        TypeError, match=r"q_dtype must be jnp.float8_e4m3fn or jnp.float8_e5m2 .*NVFP4Quantizer"
    ):
        cls(dtype)


@pytest.mark.parametrize("cls", [eqq.CurrentScaleQuantizer, eqq.DelayedScaleQuantizer])
def test_wrong_layout(cls):
    with pytest.raises(TypeError, match=r"q_layout must be an eqx_quant.QuantizeLayout"):
        cls(jnp.float8_e4m3fn, "rowwise")


def test_delayed_non_array_fields():
    with pytest.raises(
        TypeError, match=r"scale must be a float32 jax.Array, got ndarray .*jnp.asarray"
    ):
        eqq.DelayedScaleQuantizer(scale=np.ones(1, np.float32))
    with pytest.raises(
        TypeError, match=r"amax_history must be a float32 jax.Array, got a Python list"
    ):
        eqq.DelayedScaleQuantizer(amax_history=[0.0, 0.0])
    with pytest.raises(
        TypeError, match=r"scale must be a float32 jax.Array, got ArrayImpl of dtype float16"
    ):
        eqq.DelayedScaleQuantizer(scale=jnp.ones(1, jnp.float16))


def test_delayed_bad_shapes_and_values():
    with pytest.raises(ValueError, match=r"scale must have shape \(1,\), got \(2,\)"):
        eqq.DelayedScaleQuantizer(scale=jnp.ones(2))
    with pytest.raises(ValueError, match=r"amax_history must have shape \(4,\), got \(3,\)"):
        eqq.DelayedScaleQuantizer(amax_history_len=4, amax_history=jnp.zeros(3))
    with pytest.raises(ValueError, match=r"amax_history_len must be an int >= 1, got 0"):
        eqq.DelayedScaleQuantizer(amax_history_len=0)
    with pytest.raises(ValueError, match=r"margin must be a finite float >= 0 .*got inf"):
        eqq.DelayedScaleQuantizer(margin=float("inf"))
    with pytest.raises(
        ValueError, match=r"amax_compute_algo must be 'max' or 'most_recent', got 'mean'"
    ):
        eqq.DelayedScaleQuantizer(amax_compute_algo="mean")
    q = eqq.DelayedScaleQuantizer(amax_history=jnp.zeros(5))
    assert q.amax_history.shape == (5,)


@pytest.mark.parametrize("amax", [jnp.ones((2,)), jnp.float32(1.0), 1.0])
def test_update_wrong_amax(amax):
    q = eqq.DelayedScaleQuantizer(amax_history_len=3)
    with pytest.raises(ValueError, match=r"update: amax must be a jax.Array of shape "
                       r"\(1,\), got .*t.amax"):
        q.update(amax)


def test_grouped_quantizer_to_a_dense_op():
    gq = eqq.GroupedDelayedScaleQuantizer(2, amax_history_len=2)
    for fn in (eqq.quantize, eqq.quantize_dbias):
        with pytest.raises(
            TypeError, match=r"holds one scale per group .*grouped_quantize.*group\(g\)"
        ):
            fn(X, gq)


def _stack_of_delayed(scales):
    return jax.vmap(lambda s: eqq.DelayedScaleQuantizer(amax_history_len=4, scale=s))(scales)


def test_stacked_delayed_quantizer():
    """A stack of states (one per layer, from vmap) is refused outside vmap, with the fix; the
    fix gives each layer's own result."""
    scales = jnp.asarray([[1.0], [0.25], [64.0]], jnp.float32)
    stacked = _stack_of_delayed(scales)
    x = jnp.linspace(-3.0, 3.0, 32, dtype=jnp.float32).reshape(4, 8)
    for impl in ("ffi", "reference"):
        with pytest.raises(ValueError, match=r"holds a stack of states \(scale of shape \(3, 1\), "
                           r"amax_history of shape \(3, 4\)\).*jax.lax.scan"):
            eqq.quantize(x, stacked, impl=impl)
    with pytest.raises(ValueError, match=r"update: the quantizer holds a stack of states"):
        stacked.update(jnp.ones((1,)))
    data = jax.vmap(lambda q: eqq.quantize(x, q).rowwise.data)(stacked)
    updated = jax.vmap(lambda q: q.update(eqq.quantize(x, q).amax))(stacked)
    for layer in range(3):
        one = eqq.DelayedScaleQuantizer(amax_history_len=4, scale=scales[layer])
        t = eqq.quantize(x, one)
        np.testing.assert_array_equal(u8(data[layer]), u8(t.rowwise.data))
        np.testing.assert_array_equal(updated.scale[layer], one.update(t.amax).scale)


def test_stack_of_states_through_scan():
    """docs/api.md's per-layer pattern: scan over the stack, each layer with its own state."""
    scales = jnp.asarray([[1.0], [0.25], [64.0]], jnp.float32)

    def layer(h, q):
        t = eqq.quantize(h, q)
        return t.dequantize(), q.update(t.amax)

    x = jnp.linspace(-3.0, 3.0, 32, dtype=jnp.float32).reshape(4, 8)
    h, stack = jax.jit(lambda x, qs: jax.lax.scan(layer, x, qs))(x, _stack_of_delayed(scales))
    h_loop = x
    for i in range(3):
        h_loop, q = layer(h_loop, eqq.DelayedScaleQuantizer(amax_history_len=4, scale=scales[i]))
        np.testing.assert_array_equal(stack.scale[i], q.scale)
        np.testing.assert_array_equal(stack.amax_history[i], q.amax_history)
    np.testing.assert_array_equal(h, h_loop)


def test_delayed_int_margin_and_history_len():
    q_int = eqq.DelayedScaleQuantizer(amax_history_len=2, margin=1)
    q_float = eqq.DelayedScaleQuantizer(amax_history_len=2, margin=1.0)
    amax = jnp.asarray([3.0], jnp.float32)
    np.testing.assert_array_equal(q_int.update(amax).scale, q_float.update(amax).scale)
    assert q_int.update(amax).scale[0] == np.float32(448.0 / 3.0 / 2.0)
    assert q_int.amax_history_len == 2
    with pytest.raises(ValueError, match=r"amax_history_len must be an int >= 1, got True"):
        eqq.DelayedScaleQuantizer(amax_history_len=True)
    with pytest.raises(ValueError, match=r"margin must be a finite float >= 0 .*got True"):
        eqq.DelayedScaleQuantizer(margin=True)


def test_amax_axes_outside_shard_map():
    for q in (Q, eqq.BlockScaleQuantizer()):
        with pytest.raises(ValueError, match=r"amax_axes names the axis 'tp', which is not bound "
                           r"here.*shard_map.*drop amax_axes"):
            eqq.quantize(X if q is Q else jnp.ones((32, 32)), q, amax_axes=("tp",))


def test_ffi_on_platform_without_kernels():
    f = jax.jit(lambda x: eqq.quantize(x, Q, impl="ffi"))
    with pytest.raises(RuntimeError, match=r"impl='ffi' was requested .*'tpu'.*impl='reference'"):
        f.trace(X).lower(lowering_platforms=("tpu",))


def test_missing_cuda_kernels_message(monkeypatch):
    from eqx_quant._ops import _ffi

    monkeypatch.setattr(_ffi, "_loaded", lambda: {"cpu": "x"})
    with pytest.raises(RuntimeError, match=r"built without CUDA kernels.*impl='reference'"):
        _ffi.require_kernels("cuda", "fp8_quantize")
    assert _ffi.native_platforms() == frozenset({"cpu"})


def test_reference_runs_on_any_platform_lowering():
    f = jax.jit(lambda x: eqq.quantize(x, Q, impl="reference"))
    text = f.trace(X).lower(lowering_platforms=("tpu",)).as_text()
    assert "custom_call" not in text or "eqx_quant" not in text


def test_scaled_tensor_invariants():
    t = eqq.quantize(X, Q)
    with pytest.raises(TypeError, match="data_layout"):
        eqq.ScaledTensor1x(t.rowwise.data, t.rowwise.scale_inv, t.rowwise.amax,
                           eqq.ScalingMode.CURRENT_TENSOR_SCALING, "X", 1, 2, "float32")
    with pytest.raises(ValueError, match=r"flatten_axis=5 is outside \[0, 2\]"):
        eqq.ScaledTensor1x(t.rowwise.data, t.rowwise.scale_inv, t.rowwise.amax,
                           eqq.ScalingMode.CURRENT_TENSOR_SCALING, "N", 5, 2, "float32")
    with pytest.raises(TypeError, match="amax"):
        eqq.ScaledTensor1x(t.rowwise.data, t.rowwise.scale_inv, jnp.ones(2),
                           eqq.ScalingMode.CURRENT_TENSOR_SCALING, "N", 1, 2, "float32")
    with pytest.raises(ValueError, match="at least one of rowwise / colwise"):
        eqq.ScaledTensor(None, None)
