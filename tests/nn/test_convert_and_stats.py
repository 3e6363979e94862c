"""eqx_quant.nn: `quantize_model` (converting eqx.nn models), `stats` (what quantizing did to
each operand), and `dense` with Equinox's (out, in) kernel layout."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from eqx_quant import nn as qnn
from tests.support.cases import random_input

E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def _x(shape=(16, 64), seed=1, scale=1.0):
    return jnp.asarray(random_input(shape, jnp.float32, seed=seed, scale=scale))


def _linears(tree):
    return [leaf for leaf in jax.tree.leaves(tree, is_leaf=lambda a: isinstance(
        a, eqx.nn.Linear | qnn.Linear)) if isinstance(leaf, eqx.nn.Linear | qnn.Linear)]


class Net(eqx.Module):
    """Nested modules and containers of eqx.nn.Linear."""

    blocks: list
    head: eqx.nn.Linear
    extra: dict

    def __init__(self, key):
        k = jax.random.split(key, 4)
        self.blocks = [eqx.nn.MLP(64, 64, 32, 1, key=k[0]), eqx.nn.Linear(64, 64, key=k[1])]
        self.head = eqx.nn.Linear(64, 16, key=k[2])
        self.extra = {"scalar": eqx.nn.Linear("scalar", 4, key=k[3])}

    def __call__(self, x):  # one example (64,)
        h = self.blocks[1](jnp.tanh(self.blocks[0](x)))
        return self.head(h)


# --- quantize_model --------------------------------------------------------------------------


def test_quantize_model_converts_every_linear_keeping_weights():
    net = Net(jax.random.key(0))
    q = qnn.quantize_model(net, qnn.CurrentScaling())
    before, after = _linears(net), _linears(q)
    assert len(before) == len(after) == 5
    for a, b in zip(before, after, strict=True):
        if a.in_features == "scalar":
            assert type(b) is eqx.nn.Linear and b is a  # "scalar" layers are kept
            continue
        assert type(b) is qnn.Linear and b.recipe == qnn.CurrentScaling()
        np.testing.assert_array_equal(np.asarray(b.weight), np.asarray(a.weight))
        np.testing.assert_array_equal(np.asarray(b.bias), np.asarray(a.bias))
    assert isinstance(q.blocks[0], eqx.nn.MLP)  # the containers stay
    x = _x((64,))
    err = float(jnp.max(jnp.abs(q(x) - net(x))))
    assert 0 < err < 0.15 * float(jnp.max(jnp.abs(net(x))))


def test_quantize_model_without_recipe_computes_the_same():
    net = Net(jax.random.key(1))
    plain = qnn.quantize_model(net, None)
    assert all(type(l) is qnn.Linear for l in _linears(plain)[:-1])
    x = _x((8, 64))
    np.testing.assert_allclose(np.asarray(jax.vmap(plain)(x)), np.asarray(jax.vmap(net)(x)),
                               rtol=1e-6, atol=1e-6)
    mha = eqx.nn.MultiheadAttention(2, 32, use_query_bias=True, use_output_bias=True,
                                    key=jax.random.key(2))
    qmha = qnn.quantize_model(mha, None)
    assert type(qmha.query_proj) is qnn.Linear and type(qmha.output_proj) is qnn.Linear
    s = _x((8, 32), seed=3)
    np.testing.assert_allclose(np.asarray(qmha(s, s, s)), np.asarray(mha(s, s, s)), rtol=1e-6,
                               atol=1e-6)


def test_quantize_model_filter_fn_and_recipe_per_path():
    mlp = eqx.nn.MLP(64, 16, 32, 2, key=jax.random.key(0))
    seen = []

    def keep_inner(path, linear):
        seen.append(jax.tree_util.keystr(path))
        assert isinstance(linear, eqx.nn.Linear)
        return path[-1].idx not in (0, 2)

    q = qnn.quantize_model(mlp, qnn.DelayedScaling(), filter_fn=keep_inner)
    assert seen == [".layers[0]", ".layers[1]", ".layers[2]"]
    assert [type(l) for l in q.layers] == [eqx.nn.Linear, qnn.Linear, eqx.nn.Linear]
    assert q.layers[1].state.x.history_value().shape == (1024,)

    def per_path(path, linear):
        return qnn.CurrentScaling() if linear.out_features == 16 else qnn.MXFP8BlockScaling()

    q2 = qnn.quantize_model(mlp, per_path)
    assert [l.recipe for l in q2.layers] == [qnn.MXFP8BlockScaling(), qnn.MXFP8BlockScaling(),
                                             qnn.CurrentScaling()]
    q3 = qnn.quantize_model(mlp, lambda path, linear: None)
    assert [l.recipe for l in q3.layers] == [None, None, None]
    with pytest.raises(TypeError, match="filter_fn must be a function"):
        qnn.quantize_model(mlp, None, filter_fn=True)
    with pytest.raises(TypeError, match="recipe must be an eqx_quant.nn recipe"):
        qnn.quantize_model(mlp, lambda path, linear: "fp8")


def test_quantized_attention_trains_with_value_and_grad():
    mha = eqx.nn.MultiheadAttention(2, 32, key=jax.random.key(2))
    q = qnn.quantize_model(mha, qnn.DelayedScaling(amax_history_len=4))
    s = _x((8, 32), seed=3, scale=2.0)

    def loss_fn(m, s):
        return jnp.sum(m(s, s, s) ** 2)

    loss, grads, nxt = qnn.value_and_grad(loss_fn)(q, s)
    amax = float(jnp.max(jnp.abs(s)))
    # query, key and value projections each saw the whole sequence once (vmap folded)
    for proj in ("query_proj", "key_proj", "value_proj"):
        layer = getattr(nxt, proj)
        assert float(layer.state.x.history_value()[-1]) == amax
        np.testing.assert_allclose(float(layer.state.x.scale_value()[0]), E4M3_MAX / amax,
                                   rtol=1e-6)
    assert float(nxt.output_proj.state.grad.history_value()[-1]) > 0
    assert float(jnp.max(jnp.abs(grads.query_proj.weight))) > 0
    assert np.isfinite(float(loss))


def test_attention_with_stochastic_rounding_passes_its_key_to_the_projections():
    # Equinox's attention calls its projections without a key; NVFP4's gradients round
    # stochastically, so quantize_model wraps it and its key reaches them.
    mha = eqx.nn.MultiheadAttention(2, 32, key=jax.random.key(2))
    q = qnn.quantize_model(mha, qnn.NVFP4BlockScaling())
    assert type(q) is qnn.MultiheadAttention
    assert all(type(getattr(q.attention, p)) is qnn.Linear
               for p in ("query_proj", "key_proj", "value_proj", "output_proj"))
    assert type(qnn.quantize_model(mha, qnn.CurrentScaling())) is eqx.nn.MultiheadAttention
    again = qnn.quantize_model(q, qnn.NVFP4BlockScaling())  # converting twice: one wrapper
    assert type(again) is qnn.MultiheadAttention
    assert type(again.attention) is eqx.nn.MultiheadAttention
    s = _x((16, 32), seed=3)
    forward = eqx.filter_jit(lambda m, key: m(s, s, s, key=key))  # one compilation per use
    y1 = forward(q, jax.random.key(5))
    y2 = forward(q, jax.random.key(6))
    ref = mha(s, s, s)
    # the forward pass rounds to nearest (no randomness): the same for any key, and within
    # NVFP4's error of the unquantized attention (4-bit values through two GEMMs and a
    # softmax on 16-element blocks: tens of percent at these toy sizes)
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(y2))
    assert 0 < float(jnp.linalg.norm(y1 - ref)) < 0.6 * float(jnp.linalg.norm(ref))

    @eqx.filter_jit
    def query_grad(m, key):
        g = eqx.filter_grad(lambda m: jnp.sum(m(s, s, s, key=key) ** 2))(m)
        return g.attention.query_proj.weight

    def grads(key):
        return np.asarray(query_grad(q, key))

    g1, g1_again, g2 = grads(jax.random.key(5)), grads(jax.random.key(5)), grads(jax.random.key(6))
    want = np.asarray(eqx.filter_grad(lambda m: jnp.sum(m(s, s, s) ** 2))(mha).query_proj.weight)
    assert np.all(np.isfinite(g1))
    np.testing.assert_array_equal(g1, g1_again)  # the same key, the same random bits
    assert np.any(g1 != g2)  # another key, other bits
    assert np.linalg.norm(g1 - want) < 0.8 * np.linalg.norm(want)
    with pytest.raises(ValueError, match="pass key=jax.random.key"):
        q(s, s, s)
    with pytest.raises(TypeError, match="must be an eqx.nn.MultiheadAttention"):
        qnn.MultiheadAttention(q)


def test_quantized_mlp_matches_quantize_model_of_eqx_mlp():
    key = jax.random.key(5)
    recipe = qnn.DelayedScaling(amax_history_len=4)
    a = qnn.MLP(64, 16, 32, 2, recipe=recipe, key=key)
    b = qnn.quantize_model(eqx.nn.MLP(64, 16, 32, 2, key=key), recipe)
    x = _x((16, 64))
    loss = lambda m, x: jnp.sum(jax.vmap(m)(x) ** 2)
    va, ga, na = qnn.value_and_grad(loss)(a, x)
    vb, gb, nb = qnn.value_and_grad(loss)(b, x)
    assert float(va) == float(vb)
    for la, lb in zip(na.layers, nb.layers, strict=True):
        np.testing.assert_array_equal(np.asarray(la.state.x.amax_history),
                                      np.asarray(lb.state.x.amax_history))
        np.testing.assert_array_equal(np.asarray(la.state.grad.scale),
                                      np.asarray(lb.state.grad.scale))
    for la, lb in zip(ga.layers, gb.layers, strict=True):
        np.testing.assert_array_equal(np.asarray(la.weight), np.asarray(lb.weight))


# --- stats -----------------------------------------------------------------------------------


def _sq(m, x):
    return jnp.sum(m(x) ** 2)


def test_stats_current_scaling_reports_amaxes_and_scales():
    layer = qnn.Linear(64, 32, recipe=qnn.CurrentScaling(), key=jax.random.key(0))
    x = _x(scale=3.0)
    report = qnn.stats(_sq, layer, x)
    assert list(report) == [""]
    r = report[""]
    assert set(r) == {"x", "kernel", "grad"}
    assert set(r["x"]) == {"scale", "amax", "saturated", "flushed"}
    amax_x = float(jnp.max(jnp.abs(x)))
    amax_k = float(jnp.max(jnp.abs(layer.weight)))
    amax_g = float(jnp.max(jnp.abs(2 * layer(x))))
    assert float(r["x"]["amax"]) == amax_x
    np.testing.assert_allclose(float(r["x"]["scale"]), E4M3_MAX / amax_x, rtol=1e-6)
    assert float(r["kernel"]["amax"]) == amax_k
    np.testing.assert_allclose(float(r["kernel"]["scale"]), E4M3_MAX / amax_k, rtol=1e-6)
    np.testing.assert_allclose(float(r["grad"]["amax"]), amax_g, rtol=1e-6)
    np.testing.assert_allclose(float(r["grad"]["scale"]), E5M2_MAX / amax_g, rtol=1e-5)
    for role in ("x", "kernel", "grad"):  # current scaling: nothing saturates
        assert float(r[role]["saturated"]) == 0.0


def test_stats_saturated_fraction_with_delayed_scale_one():
    layer = qnn.Linear(64, 32, recipe=qnn.DelayedScaling(amax_history_len=4),
                       key=jax.random.key(0))
    x = jnp.linspace(-1000.0, 1000.0, 16 * 64, dtype=jnp.float32).reshape(16, 64)
    r = qnn.stats(lambda m, x: jnp.sum(m(x)), layer, x)[""]
    assert float(r["x"]["scale"]) == 1.0
    assert float(r["x"]["amax"]) == 1000.0
    want = float(np.mean(np.abs(np.asarray(x)) > E4M3_MAX))
    assert 0.5 < want < 0.6
    assert float(r["x"]["saturated"]) == want
    assert float(r["x"]["flushed"]) == 0.0
    # stats changes nothing: the layer's state is its initial one
    assert float(layer.state.x.scale_value()[0]) == 1.0


def _tiny_and_normal(with_zeros: bool):
    """16x64: a quarter 1e-12 (flushed at scale 1), the rest within [0.5, 2] (never flushed);
    with_zeros: the last quarter exactly 0 instead."""
    rng = np.random.default_rng(0)
    x = (rng.uniform(0.5, 2.0, (16, 64)) * rng.choice([-1.0, 1.0], (16, 64))).astype(np.float32)
    x[:, :16] = 1e-12
    if with_zeros:
        x[:, 48:] = 0.0
    return jnp.asarray(x)


def test_stats_flushed_fraction_without_zeros():
    layer = qnn.Linear(64, 32, recipe=qnn.DelayedScaling(amax_history_len=4),
                       key=jax.random.key(0))
    r = qnn.stats(_sq, layer, _tiny_and_normal(with_zeros=False))[""]
    assert float(r["x"]["flushed"]) == 0.25
    assert float(r["x"]["saturated"]) == 0.0


def test_stats_flushed_is_a_fraction_of_nonzero_values():
    layer = qnn.Linear(64, 32, recipe=qnn.DelayedScaling(amax_history_len=4),
                       key=jax.random.key(0))
    x = _tiny_and_normal(with_zeros=True)
    nonzero = int(jnp.sum(x != 0))
    assert nonzero == 768
    r = qnn.stats(_sq, layer, x)[""]
    np.testing.assert_allclose(float(r["x"]["flushed"]), 256 / nonzero, rtol=1e-6)


def test_stats_paths_block_scales_and_unquantized_layers():
    mlp = eqx.nn.MLP(64, 16, 32, 2, key=jax.random.key(0))

    def recipe(path, linear):
        return {0: qnn.NVFP4BlockScaling(stochastic_rounding=False), 1: None,
                2: qnn.CurrentScaling()}[path[-1].idx]

    q = qnn.quantize_model(mlp, recipe)
    x = _x((16, 64))
    report = qnn.stats(lambda m, x: jnp.sum(jax.vmap(m)(x) ** 2), q, x)
    assert sorted(report) == [".layers[0]", ".layers[2]"]  # no recipe, no report
    first = report[".layers[0]"]
    assert np.isnan(float(first["x"]["scale"]))  # one scale per block
    assert float(first["x"]["amax"]) == float(jnp.max(jnp.abs(x)))
    assert float(first["kernel"]["amax"]) == float(jnp.max(jnp.abs(mlp.layers[0].weight)))
    last = report[".layers[2]"]
    h = jax.nn.relu(jax.vmap(mlp.layers[1])(jax.nn.relu(jax.vmap(mlp.layers[0])(x))))
    np.testing.assert_allclose(float(last["x"]["amax"]), float(jnp.max(jnp.abs(h))), rtol=0.1)
    assert float(last["x"]["scale"]) == pytest.approx(E4M3_MAX / float(last["x"]["amax"]),
                                                      rel=1e-6)


def test_stats_mxfp8_amax_is_the_operands_amax():
    layer = qnn.Linear(64, 32, recipe=qnn.MXFP8BlockScaling(), key=jax.random.key(0))
    x = _x()
    r = qnn.stats(_sq, layer, x)[""]
    assert np.isnan(float(r["x"]["scale"]))
    assert float(r["x"]["amax"]) == float(jnp.max(jnp.abs(x)))


# --- dense with an (out, in) kernel ----------------------------------------------------------


def _current_quantizers():
    return eqq.DenseQuantizers(eqq.CurrentScaleQuantizer(), eqq.CurrentScaleQuantizer(),
                               eqq.CurrentScaleQuantizer(q_dtype=jnp.float8_e5m2))


@pytest.mark.parametrize("with_bias", [True, False])
def test_dense_out_in_kernel_equals_transposed(with_bias):
    x = _x((2, 16, 64), scale=2.0)
    w = _x((32, 64), seed=2, scale=0.25)  # (N, K), as eqx.nn.Linear's weight
    b = _x((32,), seed=3) if with_bias else None
    dy = _x((2, 16, 32), seed=4)
    qs = _current_quantizers()

    def nk(x, w, b):
        return eqq.dense(x, w, b, quantizers=qs, contracting_dims=((-1,), (-1,)))

    def kn(x, w, b):
        return eqq.dense(x, w.T, b, quantizers=qs)

    y1, pull1 = jax.vjp(nk, x, w, b)
    y2, pull2 = jax.vjp(kn, x, w, b)
    assert y1.shape == (2, 16, 32)
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(y2))
    g1, g2 = pull1(dy), pull2(dy)
    assert g1[1].shape == (32, 64)
    for a, c in zip(g1, g2, strict=True):
        if a is None:
            assert c is None and not with_bias
            continue
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
    assert float(jnp.max(jnp.abs(g1[1]))) > 0
    # and it is x @ w.T, up to FP8
    ref = jnp.einsum("bmk,nk->bmn", x, w)
    if with_bias:
        ref = ref + b[None, None, :]
    assert float(jnp.max(jnp.abs(y1 - ref))) < 0.1 * float(jnp.max(jnp.abs(ref)))


def test_dense_rejects_other_contracting_dims():
    x, w = _x((16, 64)), _x((64, 32), seed=2)
    with pytest.raises(ValueError, match="must be x's trailing n dims"):
        eqq.dense(x, w, quantizers=_current_quantizers(), contracting_dims=((0,), (0,)))
    with pytest.raises(ValueError, match="contracted dims"):
        eqq.dense(x, w, quantizers=_current_quantizers(), contracting_dims=((-1,), (-1,)))
