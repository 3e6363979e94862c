"""Sharded jit over 2 GPUs is bit-identical to one GPU (run on the 2-GPU H200 machine).

Every op family runs its CUDA kernels on one GPU (the whole array on device 0) and under
`jit` with the input sharded over a mesh of 2 GPUs (rows, columns, or both axes of a 2-D
input); the results must be the same bytes. The compiled sharded program must not gather
the input (the partition rules keep every shard local; only amaxes and dbias partials
cross devices; the grouped quantize may gather). Skipped with fewer than 2 GPUs.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from tests.support.bytes import assert_same_bytes, f32_bits_equal
from tests.support.cases import random_input
from tests.support.cuda import cuda_devices

# The reason does not say "CUDA": a one-GPU machine under EQX_QUANT_REQUIRE_CUDA=1 skips these.
pytestmark = pytest.mark.skipif(len(cuda_devices()) < 2, reason="needs 2 GPUs (nvidia-h200-x2)")

ROW = eqq.QuantizeLayout.ROWWISE
BOTH = eqq.QuantizeLayout.ROWWISE_COLWISE


def _mesh():
    return jax.sharding.Mesh(np.array(cuda_devices()[:2]), ("x",), axis_types=(AxisType.Auto,))


def _compare(got, expected, what):
    got_leaves, expected_leaves = jax.tree.leaves(got), jax.tree.leaves(expected)
    assert len(got_leaves) == len(expected_leaves), what
    for a, b in zip(got_leaves, expected_leaves):
        if a.dtype == jnp.float32:
            f32_bits_equal(a, b, what)
        else:
            assert_same_bytes(a, b, what)


def _one_and_two_gpus(fn, x, spec, *extra):
    """(result on GPU 0, result sharded over 2 GPUs, compiled sharded HLO)."""
    f = jax.jit(fn)
    gpu0 = cuda_devices()[0]
    expected = f(jax.device_put(x, gpu0), *(jax.device_put(e, gpu0) for e in extra))
    mesh = _mesh()
    xs = jax.device_put(x, NamedSharding(mesh, spec))
    es = [jax.device_put(e, NamedSharding(mesh, P())) for e in extra]
    got = f(xs, *es)
    hlo = f.lower(xs, *es).compile().as_text()
    return got, expected, hlo


TENSOR_QUANTIZERS = {
    "current": lambda: eqq.CurrentScaleQuantizer(q_layout=BOTH),
    "delayed": lambda: eqq.DelayedScaleQuantizer(
        amax_history_len=4, scale=jnp.array([3.5], jnp.float32), q_layout=BOTH
    ),
    "mxfp8": lambda: eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, BOTH),
    "nvfp4": lambda: eqq.NVFP4Quantizer(q_layout=BOTH),
    "nvfp4_rht": lambda: eqq.NVFP4Quantizer(q_layout=BOTH, use_rht=True),
    "nvfp4_2d": lambda: eqq.NVFP4Quantizer(q_layout=BOTH, use_2d=True),
}


@pytest.mark.parametrize("spec", [P("x", None), P(None, "x")], ids=str)
@pytest.mark.parametrize("name", sorted(TENSOR_QUANTIZERS))
def test_quantize_two_gpus_bit_identical(name, spec):
    q = TENSOR_QUANTIZERS[name]()
    x = jnp.asarray(random_input((512, 1024), jnp.bfloat16, seed=11) * 5)
    got, expected, hlo = _one_and_two_gpus(functools.partial(eqq.quantize, quantizer=q), x, spec)
    _compare(got, expected, f"{name} {spec}")
    assert "all-gather" not in hlo, "the input must not be gathered"


@pytest.mark.parametrize("spec", [P("x", None), P(None, "x")], ids=str)
@pytest.mark.parametrize("name", ["current", "delayed", "mxfp8"])
def test_quantize_dbias_two_gpus_bit_identical(name, spec):
    q = TENSOR_QUANTIZERS[name]()
    x = jnp.asarray(random_input((1024, 512), jnp.bfloat16, seed=12) * 3)
    fn = functools.partial(eqq.quantize_dbias, quantizer=q)
    got, expected, _ = _one_and_two_gpus(fn, x, spec)
    _compare(got, expected, f"dbias {name} {spec}")


@pytest.mark.parametrize("spec", [P("x", None), P(None, "x")], ids=str)
@pytest.mark.parametrize("use_rht", [False, True], ids=["1d", "rht"])
def test_nvfp4_stochastic_rounding_two_gpus_bit_identical(use_rht, spec):
    """The shard's offset places the rowwise bytes in x and the colwise bytes in the T layout
    (a row shard offsets the T layout's last dim, a column shard its first)."""
    q = eqq.NVFP4Quantizer(q_layout=BOTH, use_rht=use_rht, stochastic_rounding=True)
    x = jnp.asarray(random_input((512, 1024), jnp.bfloat16, seed=13) * 2)
    key = jax.random.key_data(jax.random.key(7))
    fn = lambda a, k: eqq.quantize(a, q, key=jax.random.wrap_key_data(k))  # noqa: E731
    got, expected, hlo = _one_and_two_gpus(fn, x, spec, key)
    _compare(got, expected, f"nvfp4 sr rht={use_rht} {spec}")
    assert "all-gather" not in hlo, "the input must not be gathered"


@pytest.mark.parametrize("spec", [P("x", None), P(None, "x")], ids=str)
@pytest.mark.parametrize("name", ["mxfp8", "current", "nvfp4"])
def test_grouped_quantize_two_gpus_bit_identical(name, spec):
    """(The grouped layout may gather a sharded input: only the bytes are checked.)"""
    q = TENSOR_QUANTIZERS[name]()
    x = jnp.asarray(random_input((1000, 512), jnp.bfloat16, seed=14) * 4)
    sizes = jnp.array([300, 0, 451, 249], jnp.int32)
    fn = lambda a, s: eqq.grouped_quantize(a, s, q)  # noqa: E731
    got, expected, _ = _one_and_two_gpus(fn, x, spec, sizes)
    _compare(got, expected, f"grouped {name} {spec}")


def test_grouped_dbias_two_gpus_bit_identical():
    x = jnp.asarray(random_input((1000, 512), jnp.bfloat16, seed=15))
    sizes = jnp.array([300, 0, 451, 249], jnp.int32)
    fn = lambda a, s: eqq.grouped_dbias(a, s, check=False)  # noqa: E731
    got, expected, hlo = _one_and_two_gpus(fn, x, P(None, "x"), sizes)
    _compare(got, expected, "grouped dbias")
    assert "all-" not in hlo, "column-sharded dbias needs no collective"
