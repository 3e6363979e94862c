"""The FP8 block-scaled GEMM op (`eqx_quant_fp8_block_gemm`) on its reference path (the CPU):
A (M, K) 1x128-scaled times B (N, K) with 128x128 tiles or 1x128 blocks, fed with the
quantized parts' payloads and their scales in the op's layout, within the float32
accumulation bound of the float64 product; rows of A sharded over 8 devices give the same
bytes. The CUDA kernel has its own test (tests/cuda/test_cuda_fp8_block_gemm.py)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from eqx_quant._ops.fp8_block_gemm import Fp8BlockGemmParams, fp8_block_gemm_op, gemm_scales
from tests.support.bytes import f32_bits_equal
from tests.support.cases import random_input


def _operands(m, k, n, b_tiles, seed=0):
    x = jnp.asarray(random_input((m, k), jnp.bfloat16, seed=seed) * 3)
    w = jnp.asarray(random_input((n, k), jnp.bfloat16, seed=seed + 1))
    a = eqq.quantize(x, eqq.Float8BlockQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE)).rowwise
    block = "128x128" if b_tiles else "1x128"
    b = eqq.quantize(w, eqq.Float8BlockQuantizer(block=block,
                                                 q_layout=eqq.QuantizeLayout.ROWWISE)).rowwise
    return a, b


def _run(a, b, b_tiles, impl="auto"):
    params = Fp8BlockGemmParams(b_tiles=b_tiles, impl=impl)
    (out,) = fp8_block_gemm_op.bind(a.data, gemm_scales(a), b.data, gemm_scales(b),
                                    params=params)
    return out


@pytest.mark.parametrize("b_tiles", [True, False])
@pytest.mark.parametrize("shape", [(256, 384, 128), (130, 200, 72), (64, 128, 256)])
def test_within_the_float32_bound(shape, b_tiles):
    m, k, n = shape
    a, b = _operands(m, k, n, b_tiles, seed=m)
    out = np.asarray(jax.jit(lambda a, b: _run(a, b, b_tiles))(a, b), np.float64)
    da = np.asarray(a.dequantize(jnp.float32), np.float64)
    db = np.asarray(b.dequantize(jnp.float32), np.float64)
    exact = da @ db.T
    bound = _relative_bound(k) * (np.abs(da) @ np.abs(db).T) + 1e-30
    assert out.shape == (m, n) and (np.abs(out - exact) <= bound).all()


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_rows_sharded_equal_one_device():
    a, b = _operands(256, 256, 128, True, seed=3)
    f = jax.jit(lambda a, b: _run(a, b, True))
    expected = f(a, b)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    with jax.set_mesh(mesh):
        got = f(_rows_sharded(a, mesh), b)
    f32_bits_equal(got, expected, "rows over 8 devices")


def _rows_sharded(part, mesh):
    """The part with its data's rows and its scales' matching dim sharded over "data"."""
    data = jax.device_put(part.data, NamedSharding(mesh, P("data", None)))
    scale = jax.device_put(part.scale_inv, NamedSharding(mesh, P("data", None)))
    return eqx.tree_at(lambda p: (p.data, p.scale_inv), part, (data, scale))


def _relative_bound(k: int) -> float:
    """The float32 accumulation bound on the CPU (the reference); on a GPU, the kernel's FP8
    tensor cores sum each 128-long K block with fewer bits (tests/cuda/test_cuda_gemm.py)."""
    return k * 2.0**-23 if jax.default_backend() == "cpu" else 2.0**-10


def _bound_check(y, da, db, k, what):
    exact = da @ db
    bound = _relative_bound(k) * (np.abs(da) @ np.abs(db)) + 1e-30
    err = np.abs(np.asarray(y, np.float64) - exact)
    assert (err <= bound).all(), f"{what}: {float(np.max(err / bound)):.3f} x the bound"


def _uses_op(fn, *args) -> bool:
    return "eqx_quant_fp8_block_gemm" in str(jax.make_jaxpr(fn)(*args))


@pytest.mark.parametrize("lhs_block,rhs_block", [("1x128", "128x128"), ("1x128", "1x128"),
                                                 ("128x128", "1x128"),
                                                 ("128x128", "128x128")])
def test_gemm_takes_the_op_for_e4m3_pairs(lhs_block, rhs_block):
    """`gemm` of two E4M3 FP8 block operands is the block-scaled GEMM op (a 128x128 lhs
    with a 1x128 rhs swapped, 128x128 x 128x128 with the lhs tiles' scales given per row):
    within the bound, N-D operands with several contracted dims included."""
    x = jnp.asarray(random_input((2, 72, 320), jnp.bfloat16, seed=5))
    w = jnp.asarray(random_input((320, 3, 24), jnp.bfloat16, seed=6))
    tx = eqq.quantize(x, eqq.Float8BlockQuantizer(block=lhs_block), flatten_axis=2)
    tw = eqq.quantize(w, eqq.Float8BlockQuantizer(block=rhs_block), flatten_axis=1)
    f = jax.jit(lambda a, b: eqq.gemm(a, b, ((2,), (0,)), out_dtype=jnp.float32))
    assert _uses_op(f, tx, tw)
    y = f(tx, tw)
    assert y.shape == (2, 72, 3, 24)
    da = np.asarray(tx.rowwise.dequantize(jnp.float32), np.float64).reshape(144, 320)
    db = np.asarray(tw.colwise.dequantize(jnp.float32), np.float64).reshape(320, 72)
    _bound_check(np.asarray(y).reshape(144, 72), da, db, 320, f"{lhs_block} x {rhs_block}")
    # The weight gradient's shape: both colwise copies, contracting the leading dims.
    g = jnp.asarray(random_input((2, 72, 48), jnp.bfloat16, seed=7))
    tg = eqq.quantize(g, eqq.Float8BlockQuantizer(block=rhs_block), flatten_axis=2)
    h = jax.jit(lambda a, b: eqq.gemm(a, b, ((0, 1), (0, 1)), out_dtype=jnp.float32))
    assert _uses_op(h, tx, tg)
    dx = np.asarray(tx.colwise.dequantize(jnp.float32), np.float64).reshape(144, 320)
    dg = np.asarray(tg.colwise.dequantize(jnp.float32), np.float64).reshape(144, 48)
    _bound_check(h(tx, tg), dx.T, dg, 144, "over rows")


def test_other_pairs_multiply_dequantized_values():
    """E5M2 operands, and contractions the kernel's 16-byte rows cannot hold, multiply
    float32 values (the same product definition, within the same bound)."""
    x = jnp.asarray(random_input((64, 200), jnp.bfloat16, seed=8))
    w = jnp.asarray(random_input((200, 40), jnp.bfloat16, seed=9))
    cases = [(jnp.float8_e5m2, 64, 200), (jnp.float8_e4m3fn, 64, 200)]
    for q_dtype, _, _ in cases:
        q = eqq.Float8BlockQuantizer(q_dtype=q_dtype)
        tx, tw = eqq.quantize(x, q), eqq.quantize(w, q)
        f = lambda a, b: eqq.gemm(a, b, out_dtype=jnp.float32)  # noqa: E731
        assert not _uses_op(f, tx, tw), q_dtype  # K = 200 is not a multiple of 16
        da = np.asarray(tx.rowwise.dequantize(jnp.float32), np.float64)
        db = np.asarray(tw.colwise.dequantize(jnp.float32), np.float64)
        _bound_check(f(tx, tw), da, db, 200, str(q_dtype))
    q = eqq.Float8BlockQuantizer(q_dtype=jnp.float8_e5m2)
    tx = eqq.quantize(x[:, :192], q)
    tw = eqq.quantize(w[:192], eqq.Float8BlockQuantizer())
    assert not _uses_op(lambda a, b: eqq.gemm(a, b), tx, tw)


def test_vmap_folds_examples_into_rows_and_maps_weights():
    """vmap over examples of one weight is one GEMM over their rows: the same bytes as the
    folded call; a weight per example runs each example's product (within the bound)."""
    xs = jnp.asarray(random_input((3, 64, 256), jnp.bfloat16, seed=10))
    w = jnp.asarray(random_input((256, 128), jnp.bfloat16, seed=11))
    q = eqq.Float8BlockQuantizer()
    tw = eqq.quantize(w, eqq.Float8BlockQuantizer(block="128x128"))
    one = lambda x, tw: eqq.gemm(eqq.quantize(x, q), tw, out_dtype=jnp.float32)  # noqa: E731
    got = jax.jit(jax.vmap(one, in_axes=(0, None)))(xs, tw)
    folded = jax.jit(one)(xs.reshape(192, 256), tw)
    f32_bits_equal(got.reshape(192, 128), folded, "vmap == rows of one GEMM")
    ws = jnp.asarray(random_input((3, 256, 128), jnp.bfloat16, seed=12))
    per = jax.jit(jax.vmap(lambda x, w: one(x, eqq.quantize(w, q))))(xs, ws)
    for i in range(3):
        txi, twi = eqq.quantize(xs[i], q), eqq.quantize(ws[i], q)
        _bound_check(per[i], np.asarray(txi.rowwise.dequantize(jnp.float32), np.float64),
                     np.asarray(twi.colwise.dequantize(jnp.float32), np.float64), 256,
                     f"example {i}")


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_sharded_contraction_and_columns():
    """Both operands split along K (whole 128-blocks): local products summed by one
    all-reduce (within the bound); B's rows split: the output's columns, same bytes."""
    a, b = _operands(128, 1024, 256, True, seed=13)
    f = jax.jit(lambda a, b: _run(a, b, True))
    expected = f(a, b)
    mesh = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))

    def put(part, data_spec, scale_spec):
        data = jax.device_put(part.data, NamedSharding(mesh, data_spec))
        scale = jax.device_put(part.scale_inv, NamedSharding(mesh, scale_spec))
        return eqx.tree_at(lambda p: (p.data, p.scale_inv), part, (data, scale))

    with jax.set_mesh(mesh):
        ak, bk = put(a, P(None, "x"), P(None, "x")), put(b, P(None, "x"), P(None, "x"))
        hlo = f.lower(ak, bk).compile().as_text()
        got = f(ak, bk)
        assert "all-reduce" in hlo and "all-gather" not in hlo
        cols = f(a, put(b, P("x", None), P(None, None)))
    da = np.asarray(a.dequantize(jnp.float32), np.float64)
    db = np.asarray(b.dequantize(jnp.float32), np.float64)
    _bound_check(got, da, db.T, 1024, "K over 8 devices")
    f32_bits_equal(cols, expected, "columns over 8 devices")
