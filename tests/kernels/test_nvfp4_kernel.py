"""Bit-exact tests of the NVFP4 CPU kernels (`eqx_quant_nvfp4_amax`, `eqx_quant_nvfp4_quantize`,
docs/block_formats.md) against the pure-JAX reference (`eqx_quant.reference.nvfp4`,
`.stochastic_rounding`).

The kernels are those of the CPU library that eqx_quant's loader registered (`_kernels_cpu.so`);
the tests skip when it lacks the NVFP4 kernels. The FFI targets are called directly with
`jax.ffi.ffi_call`.

Expected values come from the reference's 2-D functions on views of each example: rowwise is
`nvfp4_quantize` of the `(rows, L)` view, colwise of the `(C*L*A, K)` view of x moved to
`(C, L, A, K)` (after `rht` with RHT). In 2D mode the 16x16 tiles of an example are the
tiles of its `(a, c)` slices `(K, L)`; the slices are stacked (zero-padded to 16 rows each) so
that one reference call covers them all. Stochastic rounding reuses the reference's scale
functions and `encode_e2m1_sr` with the bytes of `random_bytes` at the `global_index` of each
element: rowwise in the global x, colwise in the global T layout `G[fa:] + G[:fa]`.

Compile time: the reference's bit-level cores take seconds to compile, so they run here
eagerly on fixed-size chunks of blocks, each jitted once (`_chunked`).
"""

import itertools
import math
import zlib

import jax.numpy as jnp
import numpy as np
import pytest

from eqx_quant.reference import ieee as ieee_ref
from eqx_quant.reference import nvfp4 as nv_ref
from tests.support.bytes import assert_bytes
from tests.support.cases import every_then_cycled
from tests.support.dtypes import X_DTYPES
from tests.support.nvfp4_kernel import (  # noqa: F401 (fixtures)
    MASK,
    check_quantize,
    chunked_cores,
    example_amaxes,
    example_rht_amaxes,
    kernel_amax,
    kernels,
    make_inputs,
    positive_axis,
    rht_amax_reference,
    rht_ok,
)

# ---------------------------------------------------------------------------------------------
# Tests: round to nearest


# (shape, flatten_axis)
SHAPES = [
    ((32, 64), -1),
    ((2, 64, 32), -1),
    ((64, 2, 32), -2),
    ((32, 256, 128), -1),
    ((32, 256, 128), -2),
    ((7, 13), -1),
    ((33, 65), -1),
    ((16, 48), -1),
    ((3, 32, 40), -2),
    ((16, 2100), -1),  # L spans several of the kernel's 256-position chunks
    ((16, 3, 1030), -2),
]


# Every (mode, dtype) on the first three shapes; the others one in turn, the last (large:
# float32 only in 2d) twice.
BOTH_CASES = every_then_cycled(
    SHAPES[:3], SHAPES[3:-1], itertools.product(["1d", "2d", "rht"], list(X_DTYPES))
) + [(*SHAPES[-1], "2d", "f32"), (*SHAPES[-1], "1d", "bf16")]


@pytest.mark.parametrize("shape,fa,mode,dtype", BOTH_CASES, ids=str)
def test_quantize_both(shape, fa, dtype, mode):
    if mode == "rht" and not rht_ok(shape, fa):
        pytest.skip("RHT needs K % 16 == 0")
    if dtype != "f32" and math.prod(shape) > 4096 and mode != "1d":
        pytest.skip("large shapes: f32 only in 2d/rht (keeps the matrix moderate)")
    x = make_inputs(shape, X_DTYPES[dtype], seed=zlib.crc32(repr((shape, fa, dtype)).encode()))
    amax = example_amaxes(x)
    use_rht = mode == "rht"
    # A colwise amax different from the rowwise one (the true post-RHT amax with RHT).
    col_amax = example_rht_amaxes(x, fa) if use_rht else amax * np.float32(0.75)
    check_quantize(x, amax, col_amax, n_batch=1, fa=fa, use_2d=mode == "2d", use_rht=use_rht)


@pytest.mark.parametrize(
    "shape,fa,colwise,use_2d",
    [
        ((32, 64), -1, False, False),
        ((7, 13), -1, False, False),
        ((13,), -1, False, False),
        ((0, 16), -1, False, False),
        ((0, 16), -1, True, True),
        ((16, 0), -1, True, False),
        ((33, 65), -1, False, True),
        ((3, 32, 40), -2, False, True),
        ((33, 65), -1, True, False),
    ],
)
@pytest.mark.parametrize("rowwise", [True, False])
def test_quantize_parts(shape, fa, colwise, use_2d, rowwise):
    if not rowwise and not colwise:
        pytest.skip("at least one part")
    x = make_inputs(shape, jnp.float32, seed=3)
    amax = example_amaxes(x)
    check_quantize(x, amax, amax, n_batch=1, fa=fa, rowwise=rowwise, colwise=colwise,
                   use_2d=use_2d)


def test_quantize_unbatched_and_two_batch_dims():
    x = make_inputs((2, 16, 48), jnp.bfloat16, seed=5)  # (3, 2, 16, 48)
    amax = example_amaxes(x, n_batch=2)
    check_quantize(x, amax, amax, n_batch=2, fa=-1, use_2d=True)
    check_quantize(x[1, 0], amax[2], amax[2], n_batch=0, fa=-1)
    col = example_rht_amaxes(x[1], -1, n_batch=1)
    check_quantize(x[1], amax[2:4], col, n_batch=1, fa=-1, use_rht=True, mask=0x1234)


@pytest.mark.parametrize(
    "amax_g",
    [0.0, np.inf, 1e-40, 3e-45, 1e38, np.float32(3.4028235e38), np.nan, 2688.0, 1.0,
     -2.0, -1e-45],
)
@pytest.mark.parametrize("use_2d", [False, True])
def test_global_amax_edges(amax_g, use_2d):
    x = make_inputs((33, 48), jnp.float32, seed=11)
    amax = np.full((3,), amax_g, np.float32)
    check_quantize(x, amax, amax[::-1].copy(), n_batch=1, use_2d=use_2d)


def test_all_special_blocks():
    """Blocks of only zeros / NaN / inf / subnormals / values above every scale."""
    rows = [
        np.zeros(32),
        np.full(32, np.nan),
        np.r_[np.full(16, np.nan), np.zeros(16)],
        np.r_[np.inf, np.zeros(15), -np.inf, np.ones(15)],
        np.full(32, 1e-45) * np.resize([1, -1], 32),
        np.full(32, 3e38) * np.resize([1, -1, 0.5, 1.125], 32),
        np.r_[np.nan, np.full(15, -1e-40), np.full(16, 6.0)],
        np.linspace(-7, 7, 32),
    ]
    x = np.stack(rows * 2).astype(np.float32)  # (16, 32)
    for amax_g in (np.float32(7.0), np.float32(3e38), np.float32(0.0), np.float32(1e-42)):
        check_quantize(x[None], amax_g[None], amax_g[None], n_batch=1)
        check_quantize(x[None], amax_g[None], amax_g[None], n_batch=1, use_2d=True)
        check_quantize(x[None], amax_g[None], amax_g[None], n_batch=1, use_rht=True)


# ---------------------------------------------------------------------------------------------
# Tests: amax op


@pytest.mark.parametrize("dtype", list(X_DTYPES))
@pytest.mark.parametrize(
    "shape,fa",
    [((32, 64), -1), ((64, 2, 32), -2), ((3, 32, 40), -1), ((7, 13), -1), ((16, 0), -1),
     ((32, 256, 128), -2)],
)
def test_amax(shape, fa, dtype):
    x = make_inputs(shape, X_DTYPES[dtype], seed=2)
    flat = x.reshape((3, math.prod(shape)))
    expected = np.array([np.asarray(ieee_ref.max_abs(jnp.asarray(e))) for e in flat], np.float32)
    amax, none = kernel_amax(x, n_batch=1, fa=fa)
    assert_bytes(amax.view(np.uint32), expected.reshape(3, 1).view(np.uint32), "amax")
    assert none.shape == (0,)
    if rht_ok(shape, fa):
        amax2, rht_amax = kernel_amax(x, n_batch=1, fa=fa, with_rht=True)
        assert_bytes(amax2.view(np.uint32), amax.view(np.uint32), "amax with RHT")
        expected_rht = np.array(
            [rht_amax_reference(e, positive_axis(shape, fa)) for e in x], np.float32
        ).reshape(3, 1)
        assert_bytes(rht_amax.view(np.uint32), expected_rht.view(np.uint32), "rht_amax")


def _summation_order_groups(mask: int) -> np.ndarray:
    """Groups of 16 (as (16, 1) examples) whose max |RHT| output depends on the summation
    order: for an output j, the products are 1 at position 0, 2^-8 at position a and 2^-24 at
    positions b, c. The pairwise tree adds 2^-24 + 2^-24 first when b, c are siblings, which
    lifts 1 + 2^-8 above the bf16 midpoint (-> 1 + 2^-7); adding them one by one ties twice
    to even (-> 1.0)."""
    r = nv_ref.rht_matrix(mask)
    groups = []
    for j in (0, 5, 15):
        for a, b, c in ((1, 2, 3), (4, 8, 12), (2, 4, 6), (8, 1, 3), (12, 14, 15)):
            p = np.zeros(16)
            p[0], p[a], p[b], p[c] = 1.0, 2.0**-8, 2.0**-24, 2.0**-24
            groups.append((p / r[:, j]).astype(np.float32))
    return np.stack(groups)[:, :, None]


@pytest.mark.parametrize("mask", [MASK, 0x0000, 0xFFFF, 0x8421])
def test_rht_summation_order(mask):
    x = _summation_order_groups(mask)
    _, rht_amax = kernel_amax(x, n_batch=1, fa=-1, with_rht=True, mask=mask)
    expected = np.array([rht_amax_reference(e, 1, mask) for e in x], np.float32)
    assert_bytes(rht_amax.reshape(-1).view(np.uint32), expected.view(np.uint32), "rht_amax")
    # sibling pairs (b, c) in the tree give 1 + 2^-7, the others 1.0
    assert (expected == np.float32(1 + 2.0**-7)).sum() >= 3 and (expected == 1.0).sum() >= 3
