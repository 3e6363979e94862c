"""The checks of more than 2^31 elements (tests/cuda/test_cuda_large.py on the GPU,
tests/kernels/test_cpu_large.py on the CPU): each kernel's bytes on sampled rows (at the
start, around and past 2^31 elements, the last row) equal the pure-JAX reference of those
rows alone. Row-local formats are exact by construction; per-tensor formats take the global
scale or amax from the full call (current scaling's scale, NVFP4's global amax: a row holding
the amax is appended to the sample)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import eqx_quant as eqq
from tests.support.bytes import assert_same_bytes


@dataclasses.dataclass(frozen=True)
class LargeCase:
    """A (rows, cols) shape past 2^31 elements; `sample`: rows to compare (one whose first
    element is past 2^31 included); `block_starts`: 32-row colwise blocks to compare;
    `group_sizes`: grouped sizes whose last group starts past 2^31 elements."""

    rows: int
    cols: int
    sample: tuple[int, ...]
    block_starts: tuple[int, ...]
    group_sizes: tuple[int, ...]

    def __post_init__(self):
        assert self.rows * self.cols > 2**31
        assert max(self.sample) * self.cols > 2**31
        assert sum(self.group_sizes) == self.rows
        assert (self.rows - self.group_sizes[-1]) * self.cols > 2**31


def big_input(case: LargeCase, device, random: bool) -> jax.Array:
    """The (rows, cols) bf16 input on `device`: normal samples, or (cheaper on a CPU) a hash
    of the element index with values of many magnitudes."""
    shape = (case.rows, case.cols)

    def hashed():
        i = jax.lax.broadcasted_iota(jnp.uint32, shape, 0)
        j = jax.lax.broadcasted_iota(jnp.uint32, shape, 1)
        h = (i * jnp.uint32(2654435761)) ^ (j * jnp.uint32(40503) + jnp.uint32(12345))
        h = h ^ (h >> 15)
        mantissa = (h & 0xFFFF).astype(jnp.float32) / 65536.0 - 0.5
        exponent = ((h >> 16) & 7).astype(jnp.float32) - 3.0
        return (mantissa * jnp.exp2(exponent)).astype(jnp.bfloat16)

    with jax.default_device(device):
        if random:
            big = jax.jit(lambda k: jax.random.normal(k, shape, jnp.bfloat16))(jax.random.key(0))
        else:
            big = jax.jit(hashed)()
    assert big.size > 2**31
    return big


def _rows(a, rows):
    return np.asarray(jax.device_get(a[jnp.asarray(rows)]))


def _with_amax_row(rows_x, amax):
    extra = np.zeros((1, rows_x.shape[1]), rows_x.dtype)
    extra[0, 0] = amax
    return np.concatenate([rows_x, extra])


def _reference(rows_x, quantizer):
    with jax.default_device(jax.devices("cpu")[0]):
        return eqq.quantize(jnp.asarray(rows_x), quantizer, impl="reference")


def _amax(x) -> float:
    return float(jax.jit(lambda x: jnp.max(jnp.abs(x)).astype(jnp.float32))(x))


def check_delayed_and_current_fp8(x, case: LargeCase):
    sample = list(case.sample)
    delayed = eqq.DelayedScaleQuantizer(scale=jnp.asarray([64.0], jnp.float32))
    t = jax.jit(lambda x: eqq.quantize(x, delayed, impl="ffi"))(x)
    rows_x = _rows(x, sample)
    ref = _reference(rows_x, delayed)
    assert_same_bytes(_rows(t.rowwise.data, sample), np.asarray(ref.rowwise.data), "delayed")
    amax = _amax(x)
    assert float(t.amax[0]) == amax
    # colwise (transposed) copy: column j of the sample rows
    col = np.asarray(jax.device_get(t.colwise.data[:, jnp.asarray(sample)])).T
    assert_same_bytes(col, np.asarray(ref.rowwise.data), "delayed colwise")
    del t

    current = eqq.CurrentScaleQuantizer()
    t = jax.jit(lambda x: eqq.quantize(x, current, impl="ffi"))(x)
    assert float(t.amax[0]) == amax
    ref = _reference(_with_amax_row(rows_x, amax), current)
    assert_same_bytes(np.asarray(jax.device_get(t.rowwise.scale_inv)),
                      np.asarray(ref.rowwise.scale_inv), "current scale")
    assert_same_bytes(_rows(t.rowwise.data, sample),
                      np.asarray(ref.rowwise.data)[: len(sample)], "current")


def check_mxfp8_rowwise_and_colwise(x, case: LargeCase):
    sample = list(case.sample)
    q = eqq.BlockScaleQuantizer()
    t = jax.jit(lambda x: eqq.quantize(x, q, impl="ffi"))(x)
    ref = _reference(_rows(x, sample), q)
    assert_same_bytes(_rows(t.rowwise.data, sample), np.asarray(ref.rowwise.data), "rows")
    assert_same_bytes(_rows(t.rowwise.scale_inv, sample), np.asarray(ref.rowwise.scale_inv),
                      "row scales")
    # colwise blocks are 32 rows: whole blocks around and past 2^31 elements
    for start in case.block_starts:
        block = list(range(start, start + 32))
        ref = _reference(_rows(x, block), q)
        assert_same_bytes(_rows(t.colwise.data, block), np.asarray(ref.colwise.data),
                          f"colwise rows {start}")
        got_scale = np.asarray(jax.device_get(t.colwise.scale_inv[start // 32]))
        assert_same_bytes(got_scale, np.asarray(ref.colwise.scale_inv[0]), f"scale {start}")


def check_nvfp4_rowwise(x, case: LargeCase):
    sample = list(case.sample)
    q = eqq.NVFP4Quantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    t = jax.jit(lambda x: eqq.quantize(x, q, impl="ffi"))(x)
    amax = float(t.amax[0])
    assert amax == _amax(x)
    ref = _reference(_with_amax_row(_rows(x, sample), amax), q)
    assert_same_bytes(_rows(t.rowwise.data, sample),
                      np.asarray(ref.rowwise.data)[: len(sample)], "nvfp4 rows")
    assert_same_bytes(_rows(t.rowwise.scale_inv, sample),
                      np.asarray(ref.rowwise.scale_inv)[: len(sample)], "nvfp4 scales")


def check_grouped_mxfp8_offsets_past_2_31(x, case: LargeCase):
    sizes = jnp.asarray(case.group_sizes, jnp.int32)
    q = eqq.BlockScaleQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    gt = jax.jit(lambda x, s: eqq.grouped_quantize(x, s, q, impl="ffi"))(x, sizes)
    starts = np.cumsum((0,) + case.group_sizes)
    rows = sorted({0, case.rows - 1, *(int(s) for s in starts[1:-1]),
                   *(int(s) - 1 for s in starts[1:-1])})
    for row in rows:
        ref = _reference(_rows(x, [row]), q)
        assert_same_bytes(_rows(gt.rowwise.data, [row]), np.asarray(ref.rowwise.data),
                          f"grouped row {row}")


def check_fp8_block_rowwise_and_colwise(x, case: LargeCase):
    """1x128 blocks: sampled rows, and whole 128-row colwise blocks (one reaching past 2^31
    elements) of the transposed copy."""
    sample = list(case.sample)
    q = eqq.Float8BlockQuantizer()
    t = jax.jit(lambda x: eqq.quantize(x, q, impl="ffi"))(x)
    ref = _reference(_rows(x, sample), q)
    assert_same_bytes(_rows(t.rowwise.data, sample), np.asarray(ref.rowwise.data), "rows")
    assert_same_bytes(_rows(t.rowwise.scale_inv, sample), np.asarray(ref.rowwise.scale_inv),
                      "row scales")
    for start in (0, (case.rows - 1) // 128 * 128 - 128, (case.rows - 1) // 128 * 128):
        block = list(range(start, min(start + 128, case.rows)))
        ref = _reference(_rows(x, block), q)
        got = jax.device_get(t.colwise.data[:, start : start + len(block)])
        assert_same_bytes(np.asarray(got), np.asarray(ref.colwise.data), f"colwise {start}")
        got_scale = jax.device_get(t.colwise.scale_inv[:, start // 128])
        assert_same_bytes(np.asarray(got_scale), np.asarray(ref.colwise.scale_inv[:, 0]),
                          f"colwise scales {start}")


def check_grouped_fp8_block_offsets_past_2_31(x, case: LargeCase):
    """Grouped 1x128: the last group's rows, transposed copy and scale columns, all past 2^31
    elements, against the dense reference on its rows, in the first and the last 128-column
    block (a block's bytes depend on its own columns only)."""
    sizes = jnp.asarray(case.group_sizes, jnp.int32)
    q = eqq.Float8BlockQuantizer()
    gt = jax.jit(lambda x, s: eqq.grouped_quantize(x, s, q, impl="ffi"))(x, sizes)
    g = len(case.group_sizes) - 1
    count = case.group_sizes[-1]
    start = case.rows - count
    last = (case.cols - 1) // 128 * 128
    cols = np.r_[0:128, last : case.cols]
    block = list(range(start, case.rows))
    ref = _reference(_rows(x, block)[:, cols], q)
    assert_same_bytes(_rows(gt.rowwise.data, block)[:, cols], np.asarray(ref.rowwise.data),
                      "rows")
    assert_same_bytes(_rows(gt.rowwise.scale_inv, block)[:, [0, last // 128]],
                      np.asarray(ref.rowwise.scale_inv), "row scales")
    # Group g's (N, count) transposed copy starts at start * N: the rows [start, R) of the
    # (R, N) view (a flat slice would need an index past int32).
    col = gt.colwise.data.reshape(case.rows, case.cols)[start:].reshape(case.cols, count)
    assert_same_bytes(np.asarray(jax.device_get(col[jnp.asarray(cols)])),
                      np.asarray(ref.colwise.data), "colwise")
    scales = gt.colwise.scale_inv_for_group(g)
    assert_same_bytes(np.asarray(jax.device_get(scales[jnp.asarray(cols)])),
                      np.asarray(ref.colwise.scale_inv), "colwise scales")
