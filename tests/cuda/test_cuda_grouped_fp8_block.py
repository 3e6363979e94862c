"""The grouped FP8 block CUDA kernel (`eqx_quant_grouped_fp8_block_quantize_cuda`) against the
CPU kernel, byte for byte: every output (rowwise / colwise data, float32 scale_inv matrices,
the entries and rows of no group) for 1x128 and 128x128, both FP8 formats, f32 / f16 / bf16
inputs, aligned and unaligned widths, empty groups, sizes past R, rows_per_unit > 1, several
examples, each layout alone and both.

The op still runs the CPU kernel's composition on a GPU until these pass on the H200
(`_ops/grouped_quantize.py`, kernel_platforms): the tests call the two FFI targets directly
with the same operands (the CPU kernel is checked against the pure-JAX reference in
tests/grouped/test_grouped_fp8_block.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.oracle import grouped as og
from tests.support.bytes import assert_same_bytes, u8
from tests.support.cuda import CUDA, requires_cuda

pytestmark = requires_cuda("grouped_fp8_block_quantize")

E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2


def _call(platform, x, sizes, q_dtype, use_2d, power_2, eps, rowwise, colwise, n_batch=0,
          rows_per_unit=1):
    batch = x.shape[:n_batch]
    r, n = x.shape[n_batch:]
    w, nb = og.worst_case_units(r, sizes.shape[-1], 128), og.cdiv(n, 128)
    q = jnp.dtype(q_dtype)

    def part(on, shape, dtype):
        return jax.ShapeDtypeStruct(batch + shape if on else (0,), dtype)

    out = (
        part(rowwise, (r, n), q),
        part(rowwise, (w, nb) if use_2d else (r, nb), jnp.float32),
        part(colwise, (r * n,), q),
        part(colwise, (nb, w) if use_2d else (n, w), jnp.float32),
    )
    device = CUDA if platform == "cuda" else jax.devices("cpu")[0]
    call = jax.ffi.ffi_call(f"eqx_quant_grouped_fp8_block_quantize_{platform}", out)
    with jax.default_device(device):
        return call(jax.device_put(x, device), jax.device_put(sizes, device),
                    n_batch=np.int64(n_batch), rows_per_unit=np.int64(rows_per_unit),
                    rowwise=rowwise, colwise=colwise, use_2d=use_2d,
                    power_2_scales=power_2, amax_epsilon=np.float32(eps))


def _input(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * 4
    x *= (2.0 ** rng.integers(-6, 7, shape[:-1])).astype(np.float32)[..., None]
    flat = x.reshape(-1, shape[-1])
    flat[1] = 0.0
    flat[2, 0], flat[2, 1], flat[3, 5] = np.nan, np.inf, -np.inf
    flat[4, :] = 1e-40
    return jnp.asarray(x, dtype)


CASES = [  # (rows, cols, sizes, rows_per_unit)
    (400, 300, (0, 130, 1, 256, 7), 1),  # empty group, sizes off 128, 6 rows of no group
    (1000, 4096, (100, 0, 300, 129, 1, 200, 70, 200), 1),  # aligned, every group partial
    (512, 256, (512,), 1),  # one group: the dense op
    (384, 136, (3, 500, 2), 1),  # clamped past R; N % 16 != 0
    (256, 128, (0, 0), 1),  # no rows in any group
    (258, 200, (40, 0, 89), 2),  # rows_per_unit = 2
    (130, 37, (60, 70), 1),  # odd width: unaligned rows
]


@pytest.mark.parametrize("block", ["1x128", "128x128"])
@pytest.mark.parametrize("q_dtype", [E4M3, E5M2])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("rows,cols,sizes,unit", CASES, ids=str)
def test_kernel_matches_cpu_kernel(rows, cols, sizes, unit, dtype, q_dtype, block):
    x = _input((rows, cols), dtype, seed=rows + cols)
    gs = jnp.asarray(sizes, jnp.int32)
    use_2d = block == "128x128"
    for power_2, eps in ((False, 0.0), (True, 1e-3)):
        for rowwise, colwise in ((True, True), (True, False), (False, True)):
            args = (x, gs, q_dtype, use_2d, power_2, eps, rowwise, colwise)
            got = _call("cuda", *args, rows_per_unit=unit)
            want = _call("cpu", *args, rows_per_unit=unit)
            what = f"{block} pow2={power_2} row={rowwise} col={colwise}"
            for i, (g, w) in enumerate(zip(got, want)):
                assert_same_bytes(u8(np.asarray(g)), u8(np.asarray(w)), f"{what} out {i}")


@pytest.mark.parametrize("block", ["1x128", "128x128"])
def test_examples_have_their_own_group_sizes(block):
    x = _input((3, 300, 260), jnp.bfloat16, seed=5)
    gs = jnp.asarray([[100, 0, 200], [0, 300, 0], [7, 7, 7]], jnp.int32)
    args = (x, gs, E4M3, block == "128x128", False, 0.0, True, True)
    got = _call("cuda", *args, n_batch=1)
    want = _call("cpu", *args, n_batch=1)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same_bytes(u8(np.asarray(g)), u8(np.asarray(w)), f"{block} out {i}")


def test_outputs_of_a_previous_call_do_not_leak():
    """Every output byte is written by the kernel: two calls into buffers XLA may reuse, the
    second with fewer rows in groups, give the CPU kernel's bytes both times."""
    x = _input((640, 512), jnp.bfloat16, seed=9)
    for sizes in ((640, 0), (100, 27)):
        gs = jnp.asarray(sizes, jnp.int32)
        for use_2d in (False, True):
            args = (x, gs, E4M3, use_2d, False, 0.0, True, True)
            got = _call("cuda", *args)
            want = _call("cpu", *args)
            for i, (g, w) in enumerate(zip(got, want)):
                assert_same_bytes(u8(np.asarray(g)), u8(np.asarray(w)),
                                  f"sizes={sizes} 2d={use_2d} out {i}")
