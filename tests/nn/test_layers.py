"""eqx_quant.nn layers: recipes' argument checks, `Linear` (initialisation, plain and quantized
calls, keys, vmap over examples), `GroupedLinear` and `MLP`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqx_quant import nn as qnn
from tests.support.cases import random_input


@pytest.fixture(autouse=True)
def _float32_matmuls():
    """The plain layers' float32 products are compared with NumPy: on a GPU, JAX's default
    float32 matmul precision (TF32) would not match them."""
    with jax.default_matmul_precision("highest"):
        yield

RECIPES = {
    "delayed": lambda: qnn.DelayedScaling(amax_history_len=4),
    "current": lambda: qnn.CurrentScaling(),
    "mxfp8": lambda: qnn.MXFP8BlockScaling(),
    "nvfp4": lambda: qnn.NVFP4BlockScaling(),
    "fp8_block": lambda: qnn.Float8BlockScaling(),
}
GROUPED_RECIPES = [n for n in RECIPES if n != "fp8_block"]  # no grouped FP8 block scaling yet
# max |quantized - plain| as a fraction of max |plain|
TOLERANCE = {"delayed": 0.15, "current": 0.15, "mxfp8": 0.15, "nvfp4": 0.35, "fp8_block": 0.15}


def _key_for(recipe, seed=5):
    """A key exactly when the recipe rounds stochastically."""
    if isinstance(recipe, qnn.NVFP4BlockScaling) and recipe.stochastic_rounding:
        return jax.random.key(seed)
    return None


def _x(shape=(16, 64), seed=1, scale=1.0):
    return jnp.asarray(random_input(shape, jnp.float32, seed=seed, scale=scale))


# --- recipes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: qnn.DelayedScaling(margin=-1.0), ValueError, "margin"),
        (lambda: qnn.DelayedScaling(margin=float("inf")), ValueError, "margin"),
        (lambda: qnn.DelayedScaling(fp8_format="x"), ValueError, "fp8_format"),
        (lambda: qnn.DelayedScaling(amax_history_len=0), ValueError, "amax_history_len"),
        (lambda: qnn.DelayedScaling(amax_history_len=True), ValueError, "amax_history_len"),
        (lambda: qnn.DelayedScaling(amax_compute_algo="mean"), ValueError, "amax_compute_algo"),
        (lambda: qnn.CurrentScaling(fp8_format="e5m2"), ValueError, "fp8_format"),
        (lambda: qnn.NVFP4BlockScaling(rht=1), TypeError, "rht must be a bool"),
        (lambda: qnn.NVFP4BlockScaling(stochastic_rounding="yes"), TypeError,
         "stochastic_rounding must be a bool"),
    ],
)
def test_recipe_rejects_bad_arguments(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_layer_rejects_non_recipe():
    with pytest.raises(TypeError, match="recipe must be an eqx_quant.nn recipe"):
        qnn.Linear(8, 4, recipe="delayed", key=jax.random.key(0))
    with pytest.raises(ValueError, match="in_features must be an int >= 1"):
        qnn.Linear("scalar", 4, recipe=None, key=jax.random.key(0))


# --- Linear ----------------------------------------------------------------------------------


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("dtype", [None, jnp.bfloat16])
def test_linear_initialised_as_eqx_linear(use_bias, dtype):
    key = jax.random.key(3)
    ref = eqx.nn.Linear(64, 32, use_bias, dtype, key=key)
    layer = qnn.Linear(64, 32, use_bias, dtype, recipe=qnn.DelayedScaling(), key=key)
    assert layer.weight.shape == (32, 64)
    assert layer.weight.dtype == ref.weight.dtype
    np.testing.assert_array_equal(np.asarray(layer.weight), np.asarray(ref.weight))
    if use_bias:
        np.testing.assert_array_equal(np.asarray(layer.bias), np.asarray(ref.bias))
    else:
        assert layer.bias is None
    # another key gives another weight
    other = qnn.Linear(64, 32, use_bias, dtype, recipe=None, key=jax.random.key(4))
    assert not np.array_equal(np.asarray(other.weight), np.asarray(ref.weight))


def test_plain_linear_is_x_at_w_transpose_plus_bias():
    layer = qnn.Linear(64, 32, recipe=None, key=jax.random.key(0))
    ref = eqx.nn.Linear(64, 32, key=jax.random.key(0))
    assert layer.state is None
    x = _x((2, 8, 64))
    want = np.asarray(x) @ np.asarray(layer.weight).T + np.asarray(layer.bias)
    # a single example (in,) -> (out,), as eqx.nn.Linear, and vmapped examples
    np.testing.assert_allclose(np.asarray(layer(x[0, 0])), np.asarray(ref(x[0, 0])), rtol=1e-6,
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.vmap(jax.vmap(layer))(x)), want, rtol=1e-5,
                               atol=1e-5)
    # a batch (*batch, in) (numpy-style broadcasting of the bias allowed here; see the next test)
    with jax.numpy_rank_promotion("allow"):
        y = layer(x)
    assert y.shape == (2, 8, 32)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)
    no_bias = qnn.Linear(64, 32, use_bias=False, recipe=None, key=jax.random.key(0))
    np.testing.assert_allclose(np.asarray(no_bias(x)), np.asarray(x) @ np.asarray(layer.weight).T,
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"x must have shape \(\*batch, in_features\)"):
        layer(_x((4, 63)))


def test_plain_linear_batched_call_under_strict_rank_promotion():
    layer = qnn.Linear(64, 32, recipe=None, key=jax.random.key(0))
    x = _x((16, 64))
    assert jax.config.jax_numpy_rank_promotion == "raise"
    y = layer(x)
    want = np.asarray(x) @ np.asarray(layer.weight).T + np.asarray(layer.bias)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)


def test_from_linear_keeps_weight_and_bias():
    ref = eqx.nn.Linear(64, 32, key=jax.random.key(9))
    layer = qnn.Linear.from_linear(ref, qnn.CurrentScaling())
    assert isinstance(layer, qnn.Linear) and layer.recipe == qnn.CurrentScaling()
    np.testing.assert_array_equal(np.asarray(layer.weight), np.asarray(ref.weight))
    np.testing.assert_array_equal(np.asarray(layer.bias), np.asarray(ref.bias))
    assert layer.state is None
    delayed = qnn.Linear.from_linear(eqx.nn.Linear(64, 32, use_bias=False, key=jax.random.key(9)),
                                     qnn.DelayedScaling(amax_history_len=8))
    assert delayed.bias is None and delayed.state.x.history_value().shape == (8,)
    with pytest.raises(TypeError, match="linear must be an eqx.nn.Linear"):
        qnn.Linear.from_linear(layer, None)


def test_stochastic_recipe_needs_key_and_others_ignore_it():
    x = _x()
    nv = qnn.Linear(64, 32, recipe=qnn.NVFP4BlockScaling(), key=jax.random.key(0))
    with pytest.raises(ValueError, match="rounds stochastically and needs random bits"):
        nv(x)
    with pytest.raises(TypeError, match="key must be a jax.random.key"):
        nv(x, key=3)
    # a layer that rounds nothing stochastically ignores a key, as eqx.nn.Linear does
    for recipe in (None, qnn.CurrentScaling(), qnn.DelayedScaling(),
                   qnn.NVFP4BlockScaling(stochastic_rounding=False)):
        layer = qnn.Linear(64, 32, recipe=recipe, key=jax.random.key(0))
        xs = x[0] if recipe is None else x
        np.testing.assert_array_equal(np.asarray(layer(xs, key=jax.random.key(1))),
                                      np.asarray(layer(xs)))


def test_stochastic_rounding_follows_the_key():
    layer = qnn.Linear(64, 32, recipe=qnn.NVFP4BlockScaling(), key=jax.random.key(0))
    x, t = _x(), _x((16, 32), seed=3)

    @eqx.filter_jit  # one compilation for every key
    def weight_grad(m, key):
        return eqx.filter_grad(lambda m: jnp.sum((m(x, key=key) - t) ** 2))(m).weight

    def grads(seed):
        return np.asarray(weight_grad(layer, jax.random.key(seed)))

    np.testing.assert_array_equal(grads(1), grads(1))
    assert not np.array_equal(grads(1), grads(2))
    # the forward pass rounds to nearest: the key changes nothing there
    np.testing.assert_array_equal(np.asarray(layer(x, key=jax.random.key(1))),
                                  np.asarray(layer(x, key=jax.random.key(2))))


@pytest.mark.parametrize("name", list(RECIPES))
def test_quantized_linear_close_to_plain(name):
    recipe = RECIPES[name]()
    key = jax.random.key(2)
    layer = qnn.Linear(64, 32, recipe=recipe, key=key)
    plain = qnn.Linear(64, 32, recipe=None, key=key)
    x = _x((32, 64))
    y, ref = layer(x, key=_key_for(recipe)), jax.vmap(plain)(x)
    assert y.shape == ref.shape and y.dtype == x.dtype
    err = float(jnp.max(jnp.abs(y - ref)))
    assert 0 < err < TOLERANCE[name] * float(jnp.max(jnp.abs(ref))), err


@pytest.mark.parametrize("name", list(RECIPES))
def test_leading_batch_dims_fold_into_rows(name):
    """(*batch, in) is the same computation as (prod(batch), in)."""
    recipe = RECIPES[name]()
    layer = qnn.Linear(64, 32, recipe=recipe, key=jax.random.key(0))
    x = _x((2, 8, 64))
    key = _key_for(recipe)
    y3 = layer(x, key=key)
    y2 = layer(x.reshape(16, 64), key=key)
    assert y3.shape == (2, 8, 32)
    np.testing.assert_array_equal(np.asarray(y3).reshape(16, 32), np.asarray(y2))


@pytest.mark.parametrize("name", list(RECIPES))
def test_vmap_over_examples_equals_batched_call(name):
    recipe = RECIPES[name]()
    layer = qnn.Linear(64, 32, recipe=recipe, key=jax.random.key(0))
    # rows of very different magnitudes: per-example scales would give other bytes
    x = _x((16, 64)) * jnp.logspace(-2, 2, 16, dtype=jnp.float32)[:, None]
    key = _key_for(recipe)
    batched = layer(x, key=key)
    mapped = jax.vmap(lambda xi: layer(xi, key=key))(x)
    np.testing.assert_array_equal(np.asarray(mapped), np.asarray(batched))


@pytest.mark.parametrize("name", ["delayed", "nvfp4"])
def test_nested_vmap_folds_both_axes(name):
    """vmap over the batch around vmap over the sequence: both axes fold into the rows."""
    recipe = RECIPES[name]()
    layer = qnn.Linear(64, 32, recipe=recipe, key=jax.random.key(0))
    x = _x((2, 8, 64)) * jnp.logspace(-2, 2, 8, dtype=jnp.float32)[None, :, None]
    t = _x((2, 8, 32), seed=2)
    key = _key_for(recipe)
    call = lambda m: jax.vmap(jax.vmap(lambda xi: m(xi, key=key)))
    np.testing.assert_array_equal(np.asarray(call(layer)(x)), np.asarray(layer(x, key=key)))
    v1, g1, m1 = qnn.value_and_grad(lambda m, x: jnp.sum((m(x, key=key) - t) ** 2))(layer, x)
    v2, g2, m2 = qnn.value_and_grad(lambda m, x: jnp.sum((call(m)(x) - t) ** 2))(layer, x)
    assert float(v1) == float(v2)
    for a, b in zip(jax.tree.leaves((g1, m1)), jax.tree.leaves((g2, m2)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name", list(RECIPES))
def test_vmap_over_examples_same_grads_and_state(name):
    recipe = RECIPES[name]()
    layer = qnn.Linear(64, 32, recipe=recipe, key=jax.random.key(0))
    x = _x((16, 64)) * jnp.logspace(-1, 1, 16, dtype=jnp.float32)[:, None]
    t = _x((16, 32), seed=2)
    key = _key_for(recipe)

    def batched(m, x, t):
        return jnp.mean((m(x, key=key) - t) ** 2)

    def mapped(m, x, t):
        return jnp.mean((jax.vmap(lambda xi: m(xi, key=key))(x) - t) ** 2)

    v1, g1, m1 = qnn.value_and_grad(batched)(layer, x, t)
    v2, g2, m2 = qnn.value_and_grad(mapped)(layer, x, t)
    assert float(v1) == float(v2)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert len(jax.tree.leaves(g1)) == 2  # weight and bias
    assert float(jnp.max(jnp.abs(g1.weight))) > 0
    for a, b in zip(jax.tree.leaves(m1), jax.tree.leaves(m2), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if name == "delayed":
        # and that state did advance, with the whole batch's amax
        assert float(m1.state.x.history_value()[-1]) == float(jnp.max(jnp.abs(x)))


# --- GroupedLinear ---------------------------------------------------------------------------


def _plain_grouped(layer, x, sizes):
    y = jax.lax.ragged_dot(x, layer.weight, sizes)
    gid = np.repeat(np.arange(len(sizes)), np.asarray(sizes))
    bias = np.zeros((x.shape[0], layer.out_features), np.float32)
    bias[: len(gid)] = np.asarray(layer.bias)[gid]
    return np.asarray(y) + bias


def test_grouped_linear_shapes_and_plain_call():
    layer = qnn.GroupedLinear(3, 64, 32, recipe=None, key=jax.random.key(0))
    assert layer.weight.shape == (3, 64, 32) and layer.bias.shape == (3, 32)
    assert layer.state is None
    bound = 1 / 8  # 1/sqrt(in_features), as eqx.nn.Linear
    assert float(jnp.max(jnp.abs(layer.weight))) <= bound
    assert float(jnp.max(jnp.abs(layer.weight))) > 0.9 * bound
    x = _x((32, 64))
    sizes = jnp.array([10, 0, 22], jnp.int32)  # an empty group
    y = layer(x, sizes)
    np.testing.assert_allclose(np.asarray(y), _plain_grouped(layer, x, sizes), rtol=1e-6,
                               atol=1e-6)
    # each row is its own expert's Linear
    np.testing.assert_allclose(np.asarray(y[12]),
                               np.asarray(x[12] @ layer.weight[2] + layer.bias[2]), rtol=1e-5,
                               atol=1e-5)
    # a key is ignored by a layer that does not round stochastically
    np.testing.assert_array_equal(np.asarray(layer(x, sizes, key=jax.random.key(0))),
                                  np.asarray(y))


@pytest.mark.parametrize("name", GROUPED_RECIPES)
def test_grouped_linear_quantized_close_to_plain(name):
    recipe = RECIPES[name]()
    key = jax.random.key(1)
    layer = qnn.GroupedLinear(3, 64, 32, recipe=recipe, key=key)
    plain = qnn.GroupedLinear(3, 64, 32, recipe=None, key=key)
    np.testing.assert_array_equal(np.asarray(layer.weight), np.asarray(plain.weight))
    x = _x((32, 64))
    sizes = jnp.array([16, 0, 16], jnp.int32)
    ref = np.asarray(plain(x, sizes))
    y = np.asarray(layer(x, sizes, key=_key_for(recipe)))
    err = float(np.max(np.abs(y - ref)))
    assert 0 < err < TOLERANCE[name] * float(np.max(np.abs(ref))), err


def test_grouped_linear_delayed_state_per_expert():
    layer = qnn.GroupedLinear(3, 64, 32, recipe=qnn.DelayedScaling(amax_history_len=4),
                              key=jax.random.key(0))
    for role in ("x", "kernel", "grad"):
        s = getattr(layer.state, role)
        assert s.history_value().shape == (3, 4) and s.scale_value().shape == (3, 1)
        assert s.scale.dtype == jnp.uint32
    x = _x((32, 64)) * jnp.where(jnp.arange(32) < 12, 10.0, 1.0)[:, None]
    sizes = jnp.array([12, 0, 20], jnp.int32)
    _, grads, nxt = qnn.value_and_grad(lambda m, x, s: jnp.sum(m(x, s) ** 2))(layer, x, sizes)
    hx = np.asarray(nxt.state.x.history_value())
    want = [float(jnp.max(jnp.abs(x[:12]))), 0.0, float(jnp.max(jnp.abs(x[12:])))]
    np.testing.assert_array_equal(hx[:, -1], np.asarray(want, np.float32))
    np.testing.assert_array_equal(hx[:, :-1], 0)
    scale = np.asarray(nxt.state.x.scale_value())[:, 0]
    np.testing.assert_allclose(scale[[0, 2]], 448 / np.asarray(want)[[0, 2]], rtol=1e-6)
    assert scale[1] == 1.0  # the empty expert keeps its scale
    hk = np.asarray(nxt.state.kernel.history_value())[:, -1]
    np.testing.assert_array_equal(hk, np.asarray(jnp.max(jnp.abs(layer.weight), axis=(1, 2))))
    assert grads.weight.shape == (3, 64, 32)
    np.testing.assert_array_equal(np.asarray(grads.weight[1]), 0)  # no rows, no gradient


def test_grouped_linear_check_false_leaves_the_sizes_check_out():
    """`check=False` drops the run-time sizes check (a host wait per call on a GPU) from the
    program, with the same values; `check=True` (the default) keeps it and catches bad sizes
    under jit; a non-bool is a TypeError naming the argument."""
    layer = qnn.GroupedLinear(3, 64, 32, recipe=qnn.CurrentScaling(), key=jax.random.key(0))
    x = _x((32, 64))
    sizes = jnp.array([10, 0, 22], jnp.int32)
    text = lambda **kw: jax.jit(lambda x, s: layer(x, s, **kw)).lower(x, sizes).as_text()  # noqa: E731
    assert "group_sizes_check" in text()
    assert "group_sizes_check" not in text(check=False)
    np.testing.assert_array_equal(np.asarray(layer(x, sizes, check=False)),
                                  np.asarray(layer(x, sizes)))
    with pytest.raises(Exception, match="sum"):
        jax.block_until_ready(jax.jit(lambda x, s: layer(x, s))(x, jnp.array([10, 0, 9])))
    with pytest.raises(TypeError, match="check must be True or False"):
        layer(x, sizes, check="no")


# --- MLP -------------------------------------------------------------------------------------


def test_mlp_matches_eqx_mlp():
    key = jax.random.key(4)
    ref = eqx.nn.MLP(64, 16, 32, 2, key=key)
    mlp = qnn.MLP(64, 16, 32, 2, recipe=None, key=key)
    assert len(mlp.layers) == 3 and all(isinstance(l, qnn.Linear) for l in mlp.layers)
    for a, b in zip(mlp.layers, ref.layers, strict=True):
        np.testing.assert_array_equal(np.asarray(a.weight), np.asarray(b.weight))
        np.testing.assert_array_equal(np.asarray(a.bias), np.asarray(b.bias))
    x = _x((2, 8, 64))
    want = jax.vmap(jax.vmap(ref))(x)
    np.testing.assert_allclose(np.asarray(jax.vmap(jax.vmap(mlp))(x)), np.asarray(want),
                               rtol=1e-5, atol=1e-6)
    with jax.numpy_rank_promotion("allow"):  # see test_plain_linear_batched_call_under_strict_...
        y = mlp(x)
    assert y.shape == (2, 8, 16)
    np.testing.assert_allclose(np.asarray(y), np.asarray(want), rtol=1e-5, atol=1e-6)
    # quantized: the same weights, close outputs
    q = qnn.MLP(64, 16, 32, 2, recipe=qnn.CurrentScaling(), key=key)
    np.testing.assert_array_equal(np.asarray(q.layers[1].weight), np.asarray(ref.layers[1].weight))
    err = float(jnp.max(jnp.abs(q(x) - want)))
    assert 0 < err < 0.15 * float(jnp.max(jnp.abs(want)))


def test_mlp_nvfp4_needs_key_and_uses_it():
    mlp = qnn.MLP(64, 16, 32, 1, recipe=qnn.NVFP4BlockScaling(), key=jax.random.key(0))
    x = _x((16, 64))
    with pytest.raises(ValueError, match="needs random bits"):
        eqx.filter_grad(lambda m: jnp.sum(m(x)))(mlp)
    grad = eqx.filter_jit(  # one compilation for every key
        lambda m, key: eqx.filter_grad(lambda m: jnp.sum(m(x, key=key) ** 2))(m))
    g1 = grad(mlp, jax.random.key(1))
    g2 = grad(mlp, jax.random.key(1))
    g3 = grad(mlp, jax.random.key(2))
    w = lambda g: np.asarray(g.layers[0].weight)
    np.testing.assert_array_equal(w(g1), w(g2))  # same key, same stochastic rounding
    assert not np.array_equal(w(g1), w(g3))  # another key, other random bits


@pytest.mark.parametrize("recipe", ["current", "mxfp8"])
def test_vmap_over_examples_compiles_to_the_batched_program(recipe):
    """The same speed: jax.vmap over examples and the batched call compile to the same
    operations (one GEMM per product, no per-example matrix-vector products)."""
    import collections
    import re

    make = {"current": qnn.CurrentScaling, "mxfp8": qnn.MXFP8BlockScaling}[recipe]
    layer = qnn.Linear(256, 128, recipe=make(), key=jax.random.key(0))
    x = jnp.asarray(random_input((64, 256), jnp.bfloat16, seed=5))

    def ops(loss):
        f = jax.jit(lambda m, x: eqx.filter_grad(loss)(m, x))
        hlo = f.lower(layer, x).compile().as_text()
        return collections.Counter(m.group(1) for m in re.finditer(r"= \S+ ([a-z\-]+)\(", hlo))

    batched = ops(lambda m, x: jnp.sum(m(x).astype(jnp.float32) ** 2))
    mapped = ops(lambda m, x: jnp.sum(jax.vmap(m)(x).astype(jnp.float32) ** 2))
    assert batched == mapped
    assert batched["dot"] == 2  # forward and weight gradient (dx is not asked for)
