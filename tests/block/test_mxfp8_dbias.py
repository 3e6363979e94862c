"""MXFP8 `quantize_dbias` from one op: the MXFP8 primitive returns the bias gradient itself.

Its tensor must be byte-identical to `quantize` and its dbias to the NumPy oracle's canonical
tree sum (tests/oracle/fp8.py), for the trees its kernel takes (one tree per example over at most
one axis longer than 1: on the GPU the rowwise blocks come from the dbias' one read) and for
the ones it hands to the FP8 op's dbias-only form (nested trees, a kept axis under sharding).
The kernel's float32 node sums equal the reference's bit for bit at every split.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from eqx_quant._ops.mxfp8_quantize import Mxfp8QuantizeParams, mxfp8_quantize_op
from tests.oracle import fp8 as oracle
from tests.support.bytes import assert_same_bytes, f32_bits_equal
from tests.support.cases import random_input
from tests.support.dtypes import X_DTYPES
from tests.support.kernels import impls

Q = {
    "row": eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, eqq.QuantizeLayout.ROWWISE),
    "row_e5m2": eqq.BlockScaleQuantizer(jnp.float8_e5m2, eqq.QuantizeLayout.ROWWISE),
    "both": eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, eqq.QuantizeLayout.ROWWISE_COLWISE),
    "col": eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, eqq.QuantizeLayout.COLWISE),
}

# (shape, flatten_axis): one tree over one axis (rows a power of two, odd, a multiple of 32),
# columns that are not whole blocks, a leading axis of 1, a second long reduced axis (nested:
# the FP8 op's form), columns over two axes, no rows; with both layouts, rows 32 * 2^j: the
# 32-row colwise blocks as the nodes (8, 2 and 1 of them); reduced axes merged into one
# (leading axes of 4, 2 x 4; with colwise blocks only when K % 32 == 0: 40 is not) or not (3).
SHAPES = [
    ((96, 64), 1),
    ((100, 96), 1),
    ((37, 64), 1),
    ((64, 48), 1),
    ((1, 40, 64), 2),
    ((5, 7, 64), 2),
    ((6, 2, 64), 1),
    ((0, 64), 1),
    ((256, 64), 1),
    ((32, 40), 1),
    ((4, 64, 64), 2),
    ((2, 40, 64), 2),
    ((3, 32, 64), 2),
    ((2, 4, 32, 64), 3),
]


def _leaves(tensor):
    return [a for a in jax.tree.leaves(tensor) if hasattr(a, "dtype")]


# Every shape with rowwise and with both layouts, one on each implementation (which one in
# turn over the shapes); the input dtype cycles over the shapes.
IMPLS = impls()
CASES = [
    (shape, fa, q_name, list(X_DTYPES)[i % len(X_DTYPES)], IMPLS[(i + j) % len(IMPLS)])
    for i, (shape, fa) in enumerate(SHAPES)
    for j, q_name in enumerate(("row", "both"))
] + [
    ((96, 64), 1, "col", "bf16", impl) for impl in IMPLS
] + [
    ((256, 64), 1, "col", "f32", IMPLS[-1]),
    ((4, 64, 64), 2, "row_e5m2", "f16", IMPLS[0]),
    ((100, 96), 1, "row_e5m2", "bf16", IMPLS[-1]),
]


@pytest.mark.parametrize("shape,fa,q_name,x_name,impl", CASES, ids=str)
def test_quantize_dbias_is_quantize_and_the_oracle_dbias(shape, fa, q_name, x_name, impl):
    x = jnp.asarray(random_input(shape, X_DTYPES[x_name], seed=len(shape) + shape[-1]))
    tensor, dbias = eqq.quantize_dbias(x, Q[q_name], flatten_axis=fa, impl=impl)
    alone = eqq.quantize(x, Q[q_name], flatten_axis=fa, impl=impl)
    for got, want in zip(_leaves(tensor), _leaves(alone), strict=True):
        assert_same_bytes(got, want, "the tensor of quantize_dbias vs quantize")
    assert_same_bytes(dbias, oracle.dbias_cast(np.asarray(x), fa), "dbias vs the oracle")


@pytest.mark.parametrize("impl", impls())
def test_dbias_special_values(impl):
    """NaN (canonical in the result), +-inf, the largest finite values (overflow to inf in
    bf16), subnormals and zeros, in the same columns as ordinary values."""
    rows = 64
    x = np.array(random_input((rows, 64), np.float32, seed=3))
    x[5, 0] = np.nan
    x[7, 1], x[9, 2], x[11, 2] = np.inf, np.inf, -np.inf
    x[:, 3] = np.float32(3.3e38)
    x[:, 4] = np.float32(1e-40)
    x[:, 5] = 0.0
    x[::2, 6] = -0.0
    x[:, 7] = -np.float32(3.3e38)
    for dtype in (jnp.float32, jnp.bfloat16):
        xd = jnp.asarray(x, dtype)
        tensor, dbias = eqq.quantize_dbias(xd, Q["row"], impl=impl)
        assert_same_bytes(dbias, oracle.dbias_cast(np.asarray(xd), 1), f"dbias of {dtype.__name__}")
        assert_same_bytes(
            tensor.rowwise.data, eqq.quantize(xd, Q["row"], impl=impl).rowwise.data, "data"
        )


@pytest.mark.skipif("ffi" not in impls(), reason="needs the CPU kernel")
@pytest.mark.parametrize(
    "rows,split,colwise",
    [
        (256, 1, False),
        (256, 2, False),
        (256, 8, True),
        (256, 8, False),
        (256, 64, False),
        (32768, 1024, True),
        (32768, 1024, False),
    ],
)
def test_kernel_node_sums_equal_the_reference(rows, split, colwise):
    """The inner primitive's float32 node sums (node 0: the whole tree) and its cast node 0,
    kernel vs reference bit for bit; node 0 is the oracle's tree (with both layouts up to
    1024 nodes: the 32-row colwise blocks)."""
    x_dtype = (jnp.float32, jnp.bfloat16)[(split.bit_length() + colwise) % 2]  # both in turn
    x = jnp.asarray(random_input((rows, 96), x_dtype, seed=split))
    outs = {}
    for impl in ("ffi", "reference"):
        params = Mxfp8QuantizeParams(
            q_dtype="float8_e4m3fn",
            flatten_axis=1,
            rowwise=True,
            colwise=colwise,
            impl=impl,
            with_dbias=True,
            dbias_split=split,
            dbias_cast=True,
        )
        outs[impl] = jax.jit(lambda v, p=params: mxfp8_quantize_op.bind_inner(v, params=p))(x)
    for k, (a, b) in enumerate(zip(outs["ffi"], outs["reference"], strict=True)):
        assert_same_bytes(a, b, f"output {k}")
    nodes, cast = outs["ffi"][4:]
    assert nodes.shape == (split, 96)
    f32_bits_equal(nodes[0], oracle.dbias(np.asarray(x), 1), "node 0")
    assert_same_bytes(cast, oracle.dbias_cast(np.asarray(x), 1), "the cast node 0")


@pytest.mark.skipif("ffi" not in impls(), reason="needs the CPU kernel")
@pytest.mark.parametrize(
    "shape,layout,split",
    [
        ((8192, 256), "row", 256),
        ((8192, 256), "both", 256),
        ((4, 2048, 256), "row", 256),
        ((64, 96), "row", 2),
        ((8192, 100), "row", 64),
        ((96, 64), "row", 32),
        ((65536, 64), "row", 64),
    ],
)
def test_block_nodes_plan(shape, layout, split):
    """The kernel's dbias nodes: the 32-row blocks of K when K = 32 * 2^j (up to 1024 of them;
    rowwise only when the last dim is whole blocks; a power-of-two batch merged into K), else
    the largest power of two <= 64 dividing the rows."""
    x = jnp.zeros(shape, jnp.bfloat16)
    fn = jax.jit(lambda v: eqq.quantize_dbias(v, Q[layout], impl="ffi"))
    assert re.findall(r"dbias_split = (\d+) : i64", fn.lower(x).as_text()) == [str(split)]


@pytest.mark.parametrize("impl", impls())
def test_vmap_and_grad(impl):
    """Under vmap each example has its own tree (the kernel's batch), and the bias cotangent
    reaches every row through grad."""
    xs = jnp.asarray(random_input((3, 40, 64), jnp.bfloat16, seed=4))
    tensors, dbias = jax.vmap(lambda v: eqq.quantize_dbias(v, Q["row"], impl=impl))(xs)
    for i in range(3):
        assert_same_bytes(dbias[i], oracle.dbias_cast(np.asarray(xs[i]), 1), f"example {i}")
        assert_same_bytes(
            tensors.rowwise.data[i],
            eqq.quantize(xs[i], Q["row"], impl=impl).rowwise.data,
            f"data {i}",
        )

    def loss(x):
        return jnp.sum(eqq.quantize_dbias(x, Q["row"], impl=impl)[1] * jnp.arange(64.0))

    g = jax.grad(loss)(xs[0].astype(jnp.float32))
    np.testing.assert_array_equal(np.asarray(g), np.broadcast_to(np.arange(64.0), (40, 64)))


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
@pytest.mark.parametrize("impl", impls())
def test_kept_axis_under_sharding_takes_the_fp8_form(impl):
    """x (8, 32, 64) with flatten_axis 2 and its second axis sharded: each device holds a kept
    axis of 8 (not one tree), so the dbias comes from the FP8 op's dbias-only form, whose
    partial sums are gathered; bit-identical to the unsharded call."""
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.asarray(random_input((8, 32, 64), jnp.bfloat16, seed=6))
    f = jax.jit(lambda v: eqq.quantize_dbias(v, Q["row"], flatten_axis=2, impl=impl))
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "x", None)))
    got, want = f(xs), f(x)
    for a, b in zip(_leaves(got), _leaves(want), strict=True):
        assert_same_bytes(a, b, "sharded vs unsharded")
    assert_same_bytes(got[1], oracle.dbias_cast(np.asarray(x), 2), "dbias vs the oracle")
    hlo = f.lower(xs).compile().as_text()
    gathers = [line for line in hlo.splitlines() if " all-" in line]
    assert gathers and all("all-gather(" in line for line in gathers), gathers
