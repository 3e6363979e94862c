"""More than 2^31 elements on the GPU: a 65536 x 40960 bf16 tensor (5 GiB, 2.7e9 elements),
so every element offset past row 52429 needs more than 31 bits, and grouped offsets past
2^31. The CUDA kernels' bytes on sampled rows (at the start, the middle, past 2^31 and the
last row) equal the pure-JAX reference of those rows alone. Row-local formats are exact by
construction; per-tensor formats take the global scale or amax from the full call (current
scaling's scale, NVFP4's global amax: a row holding the amax is appended to the sample)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from tests.support.bytes import assert_same_bytes
from tests.support.cuda import CUDA, requires_cuda

pytestmark = [requires_cuda("mxfp8_quantize"), pytest.mark.skipif(
    CUDA is not None and CUDA.memory_stats() is not None
    and CUDA.memory_stats().get("bytes_limit", 0) < 40 * 2**30,
    reason="needs a CUDA device with 40 GiB")]

ROWS, COLS = 65536, 40960
SAMPLE = (0, 1, 31, 32768, 52429, 60001, ROWS - 1)  # 52429 * 40960 > 2^31


@pytest.fixture(scope="module")
def x():
    with jax.default_device(CUDA):
        big = jax.jit(lambda k: jax.random.normal(k, (ROWS, COLS), jnp.bfloat16))(
            jax.random.key(0))
    assert big.size > 2**31
    yield big
    big.delete()


def _rows(a, rows):
    return np.asarray(jax.device_get(a[jnp.asarray(rows)]))


def _with_amax_row(rows_x, amax):
    """The sampled rows and one more row holding the full tensor's amax, so that a per-tensor
    scale or global amax computed from them equals the full call's."""
    extra = np.zeros((1, rows_x.shape[1]), rows_x.dtype)
    extra[0, 0] = amax
    return np.concatenate([rows_x, extra])


def _reference(rows_x, quantizer):
    with jax.default_device(jax.devices("cpu")[0]):
        return eqq.quantize(jnp.asarray(rows_x), quantizer, impl="reference")


def test_delayed_and_current_fp8(x):
    delayed = eqq.DelayedScaleQuantizer(scale=jnp.asarray([64.0], jnp.float32))
    t = jax.jit(lambda x: eqq.quantize(x, delayed, impl="ffi"))(x)
    rows_x = _rows(x, SAMPLE)
    ref = _reference(rows_x, delayed)
    assert_same_bytes(_rows(t.rowwise.data, SAMPLE), np.asarray(ref.rowwise.data), "delayed")
    amax = float(jnp.max(jnp.abs(x.astype(jnp.float32))))
    assert float(t.amax[0]) == amax
    # colwise (transposed) copy: column j of the sample rows
    col = np.asarray(jax.device_get(t.colwise.data[:, jnp.asarray(SAMPLE)])).T
    assert_same_bytes(col, np.asarray(ref.rowwise.data), "delayed colwise")
    del t

    current = eqq.CurrentScaleQuantizer()
    t = jax.jit(lambda x: eqq.quantize(x, current, impl="ffi"))(x)
    assert float(t.amax[0]) == amax
    ref = _reference(_with_amax_row(rows_x, amax), current)
    assert_same_bytes(np.asarray(jax.device_get(t.rowwise.scale_inv)),
                      np.asarray(ref.rowwise.scale_inv), "current scale")
    assert_same_bytes(_rows(t.rowwise.data, SAMPLE),
                      np.asarray(ref.rowwise.data)[: len(SAMPLE)], "current")


def test_mxfp8_rowwise_and_colwise(x):
    q = eqq.BlockScaleQuantizer()
    t = jax.jit(lambda x: eqq.quantize(x, q, impl="ffi"))(x)
    rows_x = _rows(x, SAMPLE)
    ref = _reference(rows_x, q)
    assert_same_bytes(_rows(t.rowwise.data, SAMPLE), np.asarray(ref.rowwise.data), "rows")
    assert_same_bytes(_rows(t.rowwise.scale_inv, SAMPLE), np.asarray(ref.rowwise.scale_inv),
                      "row scales")
    # colwise blocks are 32 rows: whole blocks around and past 2^31 elements
    for start in (0, 52416, ROWS - 32):
        block = list(range(start, start + 32))
        ref = _reference(_rows(x, block), q)
        assert_same_bytes(_rows(t.colwise.data, block), np.asarray(ref.colwise.data),
                          f"colwise rows {start}")
        got_scale = np.asarray(jax.device_get(t.colwise.scale_inv[start // 32]))
        assert_same_bytes(got_scale, np.asarray(ref.colwise.scale_inv[0]), f"scale {start}")


def test_nvfp4_rowwise(x):
    q = eqq.NVFP4Quantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    t = jax.jit(lambda x: eqq.quantize(x, q, impl="ffi"))(x)
    amax = float(t.amax[0])
    assert amax == float(jnp.max(jnp.abs(x.astype(jnp.float32))))
    ref = _reference(_with_amax_row(_rows(x, SAMPLE), amax), q)
    assert_same_bytes(_rows(t.rowwise.data, SAMPLE),
                      np.asarray(ref.rowwise.data)[: len(SAMPLE)], "nvfp4 rows")
    assert_same_bytes(_rows(t.rowwise.scale_inv, SAMPLE),
                      np.asarray(ref.rowwise.scale_inv)[: len(SAMPLE)], "nvfp4 scales")


def test_grouped_mxfp8_offsets_past_2_31(x):
    sizes = jnp.asarray([20000, 0, 32429, 13107], jnp.int32)  # group 3 starts past 2^31
    q = eqq.BlockScaleQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    gt = jax.jit(lambda x, s: eqq.grouped_quantize(x, s, q, impl="ffi"))(x, sizes)
    for row in (0, 19999, 20000, 52428, 52429, ROWS - 1):
        ref = _reference(_rows(x, [row]), q)
        assert_same_bytes(_rows(gt.rowwise.data, [row]), np.asarray(ref.rowwise.data),
                          f"grouped row {row}")
