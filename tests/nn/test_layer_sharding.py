"""`eqx_quant.nn` layers on meshes of 8 fake CPU devices: sharded jit (Auto and Explicit
axes) and shard_map, through `value_and_grad`: parameter gradients as the unsharded step,
and the next delayed state bit for bit (amaxes maxed over the mesh, never summed)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant.nn as qnn
from tests.support.cases import random_input

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")

RECIPES = {
    "delayed": lambda: qnn.DelayedScaling(amax_history_len=4),
    "current": lambda: qnn.CurrentScaling(),
    "mxfp8": lambda: qnn.MXFP8BlockScaling(),
    "nvfp4": lambda: qnn.NVFP4BlockScaling(stochastic_rounding=False),
    "fp8_block": lambda: qnn.Float8BlockScaling(),
}


def _x():
    rows = jnp.asarray(random_input((64, 32), jnp.float32, seed=51))
    return rows * jnp.arange(1, 65, dtype=jnp.float32).reshape(64, 1) / 16


def _loss(model, x):
    return jnp.sum(jax.vmap(model)(x) ** 2)


def _close(got, want, what):
    scale = float(jnp.max(jnp.abs(want)))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5 * scale,
                               err_msg=what)


def _same_state(got, want):
    if want is None:
        assert got is None
        return
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto], ids=str)
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_linear_step_under_sharded_jit(recipe, axis_type):
    layer = qnn.Linear(32, 16, recipe=RECIPES[recipe](), key=jax.random.key(0))
    x = _x()
    _, want, want_model = qnn.value_and_grad(_loss)(layer, x)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(axis_type,))
    with jax.set_mesh(mesh):
        xs = jax.device_put(x, NamedSharding(mesh, P("data")))
        _, got, got_model = eqx.filter_jit(qnn.value_and_grad(_loss))(layer, xs)
    _close(got.weight, want.weight, "dweight")
    _close(got.bias, want.bias, "dbias")
    _same_state(got_model.state, want_model.state)


@pytest.mark.parametrize("recipe", ["delayed", "current"])
def test_linear_step_inside_shard_map(recipe):
    layer = qnn.Linear(32, 16, recipe=RECIPES[recipe](), key=jax.random.key(0))
    x = _x()
    params, rest = qnn.partition(layer)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))

    def local(params, x):
        _, grads, model = qnn.value_and_grad(_loss)(eqx.combine(params, rest), x)
        return grads, qnn.partition(model)[1].state

    xs = jax.device_put(x, NamedSharding(mesh, P("data")))
    grads, state = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P("data")),
                                         out_specs=(P(), P())))(params, xs)
    _, want, want_model = qnn.value_and_grad(_loss)(layer, x)
    if recipe == "delayed":  # one stored scale for every device: the unsharded step
        _close(grads.weight, want.weight, "dweight")
        _same_state(state, want_model.state)
    else:  # each device scales its rows by its own amax: close to the unsharded step
        np.testing.assert_allclose(np.asarray(grads.weight), np.asarray(want.weight),
                                   rtol=0.1, atol=0.05 * float(jnp.max(jnp.abs(want.weight))))
