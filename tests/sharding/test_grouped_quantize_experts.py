"""Expert-parallel quantization of stacked expert weights under sharded `jit`: a `[G, K, N]`
tensor quantized with `grouped_quantize(w, None, q)` (group g is expert g) and its leading
(expert) axis sharded over 8 devices keeps that sharding with per-tensor FP8 and in
`grouped_quantize_dbias`: each device quantizes its own experts, the bytes equal the
unsharded call's, and nothing weight-sized is gathered (only per-row amax keys and the group
sizes). The block formats' scale buffers are laid out for the whole tensor: their rows stay
whole (docs/distributed.md)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from tests.support.bytes import assert_same_bytes
from tests.support.cases import random_input

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")

G, K, N = 16, 128, 64
QUANTIZERS = {
    "current": lambda: eqq.CurrentScaleQuantizer(),
    "current_rowwise": lambda: eqq.CurrentScaleQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE),
    "delayed": lambda: eqq.GroupedDelayedScaleQuantizer(
        G, scale=jnp.linspace(1.0, 4.0, G, dtype=jnp.float32)),
}


def _gathered_elements(hlo: str) -> list[int]:
    """The element counts of every all-gather's result in compiled HLO text."""
    counts = []
    for shape in re.findall(r"= \w+\[([\d,]*)\]\S* all-gather\(", hlo):
        counts.append(int(np.prod([int(d) for d in shape.split(",") if d] or [1])))
    return counts


@pytest.mark.parametrize("dbias", [False, True])
@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
@pytest.mark.parametrize("name", sorted(QUANTIZERS))
def test_experts_stay_on_their_devices(name, axis_type, dbias):
    q = QUANTIZERS[name]()
    w = jnp.asarray(random_input((G, K, N), jnp.bfloat16, seed=7) * 3)
    if dbias:
        f = jax.jit(lambda w: eqq.grouped_quantize_dbias(w, None, q))
    else:
        f = jax.jit(lambda w: eqq.grouped_quantize(w, None, q))
    expected = f(w)
    mesh = jax.make_mesh((8,), ("ep",), axis_types=(axis_type,))
    with jax.set_mesh(mesh):
        ws = jax.device_put(w, NamedSharding(mesh, P("ep")))
        got = f(ws)
        hlo = f.lower(ws).compile().as_text()
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert_same_bytes(a, b, f"{name} dbias={dbias}")
    gathered = _gathered_elements(hlo)
    assert all(c <= G * K for c in gathered), f"weight-sized all-gather: {gathered}"
    if axis_type == AxisType.Auto:
        tensor = got[0] if dbias else got
        assert tensor.rowwise.data.sharding.spec[0] == "ep"
