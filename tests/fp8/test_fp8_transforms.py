"""eager / jit / vmap (per-example) / grad (straight-through) / scan with delayed scaling."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import eqx_quant as eqq
from tests.oracle import fp8 as oracle
from tests.support.bytes import assert_same_bytes, f32_bits_equal
from tests.support.cases import random_input
from tests.support.kernels import impls

LAYOUT = eqq.QuantizeLayout.ROWWISE_COLWISE


def _assert_same_tensor(a, b, what=""):
    for part_a, part_b in ((a.rowwise, b.rowwise), (a.colwise, b.colwise)):
        assert (part_a is None) == (part_b is None)
        if part_a is not None:
            assert_same_bytes(part_a.data, part_b.data, f"{what} data")
            f32_bits_equal(part_a.scale_inv, part_b.scale_inv, f"{what} scale_inv")
            f32_bits_equal(part_a.amax, part_b.amax, f"{what} amax")


@pytest.mark.parametrize("impl", impls())
def test_eager_equals_jit(impl):
    x = jnp.asarray(random_input((16, 24), jnp.bfloat16))
    q = eqq.CurrentScaleQuantizer()
    _assert_same_tensor(
        eqq.quantize(x, q, impl=impl), jax.jit(lambda x: eqq.quantize(x, q, impl=impl))(x)
    )


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize("fa", [-1, -2])
def test_vmap_is_per_example(impl, fa):
    """vmap(quantize)(xs) == stack(quantize(xs[i])): each example has its own amax and scale."""
    xs = (
        jnp.asarray(random_input((4, 6, 5, 8), jnp.float32))
        * jnp.array([1.0, 10.0, 0.01, 300.0]).reshape(4, 1, 1, 1)
    )
    q = eqq.CurrentScaleQuantizer()
    batched = jax.vmap(lambda x: eqq.quantize(x, q, fa, impl=impl))(xs)
    for i in range(xs.shape[0]):
        single = eqq.quantize(xs[i], q, fa, impl=impl)
        _assert_same_tensor(jax.tree.map(lambda a: a[i], batched), single, f"example {i}")
    assert len(set(np.asarray(batched.amax).ravel().tolist())) == 4


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize("shape", [(3, 0, 8), (3, 6, 0), (0, 6, 8)])
@pytest.mark.parametrize("delayed", [False, True])
def test_vmap_of_empty_examples(impl, shape, delayed):
    """Examples of zero elements under vmap (the reference once raised ZeroDivisionError):
    amax 0, dbias zeros (or of zero size), the same as the per-example call."""
    xs = jnp.zeros(shape, jnp.bfloat16)
    if delayed:
        q = eqq.DelayedScaleQuantizer(amax_history_len=2, scale=jnp.array([2.0], jnp.float32))
    else:
        q = eqq.CurrentScaleQuantizer()
    t, db = jax.vmap(lambda x: eqq.quantize_dbias(x, q, impl=impl))(xs)
    assert t.rowwise.data.shape == shape and t.colwise.data.shape == (shape[0],) + shape[:0:-1]
    assert db.shape == (shape[0], shape[2])
    for i in range(shape[0]):
        t1, db1 = eqq.quantize_dbias(xs[i], q, impl=impl)
        _assert_same_tensor(jax.tree.map(lambda a: a[i], t), t1, f"example {i}")
        assert_same_bytes(db[i], db1, "dbias")
        assert float(t1.amax[0]) == 0.0
        assert_same_bytes(db1, np.zeros(shape[2], ml_dtypes.bfloat16), "dbias zeros")


@pytest.mark.parametrize("impl", impls())
def test_nested_vmap_and_dbias(impl):
    xs = jnp.asarray(random_input((2, 3, 5, 7), jnp.bfloat16, seed=4))
    q = eqq.CurrentScaleQuantizer()
    f = jax.vmap(jax.vmap(lambda x: eqq.quantize_dbias(x, q, impl=impl)))
    t, db = f(xs)
    for i in range(2):
        for j in range(3):
            t1, db1 = eqq.quantize_dbias(xs[i, j], q, impl=impl)
            _assert_same_tensor(jax.tree.map(lambda a: a[i, j], t), t1)
            assert_same_bytes(db[i, j], db1, "dbias")


@pytest.mark.parametrize("impl", impls())
def test_vmap_over_quantizers(impl):
    """Only the quantizer is batched: each delayed scale is used for its own copy of x."""
    x = jnp.asarray(random_input((8, 16), jnp.float32))
    scales = jnp.array([[1.0], [2.0], [0.5]], jnp.float32)
    qs = jax.vmap(lambda s: eqq.DelayedScaleQuantizer(amax_history_len=2, scale=s))(scales)
    t = jax.vmap(lambda q: eqq.quantize(x, q, impl=impl))(qs)
    for i in range(3):
        expected = oracle.quantize_tensor(
            np.asarray(x), np.asarray(scales[i]), ml_dtypes.float8_e4m3fn, -1, True, True
        )
        assert_same_bytes(t.rowwise.data[i], expected["row"])


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize("part", ["container", "rowwise", "colwise"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_grad_is_straight_through(impl, part, dtype):
    x = jnp.asarray(random_input((3, 4, 8), dtype))
    w = jnp.asarray(random_input((3, 4, 8), jnp.float32, seed=9))
    q = eqq.CurrentScaleQuantizer()

    def loss(x):
        t = eqq.quantize(x, q, -2, impl=impl)
        y = {"container": t, "rowwise": t.rowwise, "colwise": t.colwise}[part].dequantize()
        return jnp.sum(y.astype(jnp.float32) * w)

    g = jax.grad(loss)(x)
    assert g.dtype == x.dtype and g.shape == x.shape
    assert_same_bytes(g, w.astype(dtype), "grad")
    assert_same_bytes(jax.jit(jax.grad(loss))(x), w.astype(dtype), "jit grad")


@pytest.mark.parametrize("impl", impls())
def test_grad_through_dbias_and_vmap(impl):
    x = jnp.asarray(random_input((2, 5, 4), jnp.float32))
    q = eqq.CurrentScaleQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE)

    def loss(x):
        t, db = eqq.quantize_dbias(x, q, impl=impl)
        return jnp.sum(t.dequantize() * 2.0) + jnp.sum(db * jnp.arange(4.0))

    g = jax.vmap(jax.grad(loss))(x)
    expected = np.broadcast_to(2.0 + np.arange(4.0, dtype=np.float32), x.shape)
    np.testing.assert_array_equal(np.asarray(g), expected)


@pytest.mark.parametrize("impl", impls())
def test_delayed_scaling_through_scan(impl):
    """The quantizer is the scan carry; every step's amax reaches the history (vs the oracle)."""
    xs = (
        jnp.asarray(random_input((6, 8, 16), jnp.bfloat16))
        * jnp.arange(1, 7, dtype=jnp.bfloat16).reshape(6, 1, 1)
    )
    q0 = eqq.DelayedScaleQuantizer(amax_history_len=4, margin=1.0)

    def step(q, x):
        t = eqq.quantize(x, q, impl=impl)
        return q.update(t.amax), t.rowwise.data

    q_final, datas = jax.lax.scan(step, q0, xs)
    history, scale = np.zeros(4, np.float32), np.ones(1, np.float32)
    for i in range(6):
        x = np.asarray(xs[i])
        expected = oracle.quantize_tensor(x, scale, ml_dtypes.float8_e4m3fn, -1, True, False)
        assert_same_bytes(datas[i], expected["row"], f"step {i}")
        history, scale = oracle.delayed_update(
            history, scale, expected["amax"], ml_dtypes.float8_e4m3fn, 1.0, "max"
        )
    f32_bits_equal(q_final.amax_history, history, "history")
    f32_bits_equal(q_final.scale, scale, "scale")


def test_gradient_accumulation_keeps_every_amax():
    """Micro-batches: combine their amaxes with jnp.maximum, then update once."""
    q = eqq.DelayedScaleQuantizer(amax_history_len=3)
    micro = [jnp.full((4, 4), v, jnp.float32) for v in (1.0, 7.0, 2.0)]
    amax = jnp.zeros((1,), jnp.float32)
    for x in micro:
        amax = jnp.maximum(amax, eqq.quantize(x, q).amax)
    q2 = q.update(amax)
    assert float(q2.amax_history[-1]) == 7.0
    assert (
        float(q2.scale[0]) == 448.0 / 7.0
        or np.float32(q2.scale[0]) == np.float32(448.0) / np.float32(7.0)
    )
    assert float(q.scale[0]) == 1.0  # the old quantizer is unchanged


def test_update_matches_oracle_and_is_pure():
    rng = np.random.default_rng(0)
    for algo in ("max", "most_recent"):
        q = eqq.DelayedScaleQuantizer(
            jnp.float8_e5m2, amax_history_len=5, margin=2.0, amax_compute_algo=algo
        )
        history, scale = np.zeros(5, np.float32), np.ones(1, np.float32)
        for amax in [3.0, 0.0, 1e-42, 100.0, np.inf, np.nan, 7.5]:
            a = np.array([amax], np.float32) * np.float32(rng.uniform(0.5, 2))
            q_new = jax.jit(lambda q, a: q.update(a))(q, jnp.asarray(a))
            history, scale = oracle.delayed_update(
                history, scale, a, ml_dtypes.float8_e5m2, 2.0, algo
            )
            f32_bits_equal(q_new.amax_history, history, f"{algo} history")
            f32_bits_equal(q_new.scale, scale, f"{algo} scale")
            assert q_new is not q
            q = q_new
