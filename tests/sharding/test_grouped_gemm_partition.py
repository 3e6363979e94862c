"""The grouped GEMM op's partition rule (eqx_quant/_ops/grouped_gemm.py) on 8 CPU devices:
tokens sharded (data parallel), experts sharded (expert parallel), weights' N sharded (column
parallel) and K sharded on both sides (row parallel) give the unsharded result, and the
weights are never gathered."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from eqx_quant._gemm._ragged import grouped_outer, grouped_rows
from tests.support.cases import random_input

M, K, N, G = 256, 64, 32, 8
SIZES = [40, 0, 31, 57, 16, 9, 48, 23]  # 32 rows past the last group


def _inputs():
    a = jnp.asarray(random_input((M, K), jnp.bfloat16, seed=11))
    b = jnp.asarray(random_input((G, K, N), jnp.bfloat16, seed=12, scale=0.2))
    c = jnp.asarray(random_input((M, N), jnp.bfloat16, seed=13))
    alpha = jnp.linspace(0.5, 2.0, G, dtype=jnp.float32)
    return a, b, c, jnp.asarray(SIZES, jnp.int32), alpha


def _rows(a, b, counts, alpha):
    return grouped_rows(a, b, counts, alpha, transposed=False, out_dtype="float32")


def _outer(a, c, counts, alpha):
    return grouped_outer(a, c, counts, alpha, transposed=False, k=K, n=N, out_dtype="float32")


LAYOUTS = {
    "data": (P("x", None), P(None, None, None)),
    "experts": (P(None, None), P("x", None, None)),
    "columns": (P(None, None), P(None, None, "x")),
    "rows_k": (P(None, "x"), P(None, "x", None)),
    "data_and_experts": (P("d", None), P("e", None, None)),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_grouped_rows_partition(layout):
    a, b, _, counts, alpha = _inputs()
    want = np.asarray(jax.jit(_rows)(a, b, counts, alpha))
    a_spec, b_spec = LAYOUTS[layout]
    shape, names = ((2, 4), ("d", "e")) if layout == "data_and_experts" else ((8,), ("x",))
    mesh = jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))
    alpha_spec = P(b_spec[0])
    args = (
        jax.device_put(a, NamedSharding(mesh, a_spec)),
        jax.device_put(b, NamedSharding(mesh, b_spec)),
        jax.device_put(counts, NamedSharding(mesh, P(None))),
        jax.device_put(alpha, NamedSharding(mesh, alpha_spec)),
    )
    fn = jax.jit(_rows)
    got = np.asarray(fn(*args))
    # the same products; XLA may order the float32 sums of a split product differently
    tol = 2.0**-18 * np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    hlo = fn.lower(*args).compile().as_text()
    gathered = re.findall(r"all-gather[^\n]*bf16\[(\d+),(\d+),(\d+)\]", hlo)
    assert not gathered, f"{layout}: the weights were gathered: {gathered}"


@pytest.mark.parametrize("layout", ["data", "columns"])
def test_grouped_outer_partition(layout):
    a, _, c, counts, alpha = _inputs()
    want = np.asarray(jax.jit(_outer)(a, c, counts, alpha))
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    a_spec, c_spec = (
        (P("x", None), P("x", None)) if layout == "data" else (P(None, None), P(None, "x"))
    )
    args = (
        jax.device_put(a, NamedSharding(mesh, a_spec)),
        jax.device_put(c, NamedSharding(mesh, c_spec)),
        jax.device_put(counts, NamedSharding(mesh, P(None))),
        jax.device_put(alpha, NamedSharding(mesh, P(None))),
    )
    got = np.asarray(jax.jit(_outer)(*args))
    # XLA may order the float32 sums of a split product differently
    tol = 2.0**-18 * np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    for g, count in enumerate(SIZES):
        if count == 0:
            np.testing.assert_array_equal(got[g], 0.0)
