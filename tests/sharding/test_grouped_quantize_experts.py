"""Expert-parallel quantization of stacked expert weights under sharded `jit`: a `[G, K, N]`
tensor quantized with `grouped_quantize(w, None, q)` (group g is expert g) and its leading
(expert) axis sharded over 8 devices keeps that sharding with per-tensor FP8, MXFP8 and
NVFP4 and in `grouped_quantize_dbias`: each device quantizes its own experts, the bytes equal
the unsharded call's, and nothing weight-sized is gathered (only per-row amax keys, the group
sizes and, for the block formats, the packed scale buffers; docs/distributed.md)."""

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
    "mxfp8": lambda: eqq.BlockScaleQuantizer(),
    "nvfp4": lambda: eqq.NVFP4Quantizer(),
    "nvfp4_2d": lambda: eqq.NVFP4Quantizer(use_2d=True),
}
# The block formats' scale buffers are gathered (each device's swizzled scales, a small
# fraction of its experts' bytes); nothing data-sized moves.
BLOCK_FORMATS = ("mxfp8", "nvfp4", "nvfp4_2d")


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
    tensor = got[0] if dbias else got
    limit = G * K
    if name in BLOCK_FORMATS:
        scales = [p.scale_inv.size for p in (tensor.rowwise, tensor.colwise) if p is not None]
        assert max(scales) < G * K * N // 4  # swizzled scale bytes, well below the data's
        limit = max(scales)
        assert gathered, "the scale buffers are gathered"
    assert all(c <= limit for c in gathered), f"weight-sized all-gather: {gathered}"
    if axis_type == AxisType.Auto:
        assert tensor.rowwise.data.sharding.spec[0] == "ep"


@pytest.mark.parametrize("name", ["mxfp8", "nvfp4"])
def test_block_format_experts_over_two_mesh_axes_and_under_vmap(name):
    """Experts split over two mesh axes at once (a compound axis), and a vmapped stack of two
    such tensors: the gathered scale buffers keep the groups in order."""
    q = QUANTIZERS[name]()
    w = jnp.asarray(random_input((2, G, K, N), jnp.bfloat16, seed=8) * 3)
    f = jax.jit(jax.vmap(lambda w: eqq.grouped_quantize(w, None, q)))
    expected = f(w)
    mesh = jax.make_mesh((2, 4), ("a", "b"), axis_types=(AxisType.Auto,) * 2)
    with jax.set_mesh(mesh):
        ws = jax.device_put(w, NamedSharding(mesh, P(None, ("a", "b"))))
        got = f(ws)
        hlo = f.lower(ws).compile().as_text()
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert_same_bytes(a, b, name)
    limit = max(p.scale_inv.size for p in (got.rowwise, got.colwise) if p is not None)
    assert all(c <= limit for c in _gathered_elements(hlo))
    assert got.rowwise.data.sharding.spec[1] == ("a", "b")
