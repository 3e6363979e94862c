"""The MXFP8 CUDA kernel (`eqx_quant_mxfp8_quantize_cuda`) against the CPU kernel, byte for byte.

Runs only where a CUDA device and eqx_quant's CUDA MXFP8 kernel are present (otherwise skipped
with a reason that mentions CUDA, which `EQX_QUANT_REQUIRE_CUDA=1` turns into a failure).

Every case quantizes x with `eqx_quant.quantize(x, BlockScaleQuantizer(q_dtype, layout), fa,
impl="ffi")` on the GPU and compares the bytes of every output (rowwise / colwise data and E8M0
scale_inv, and the amax placeholder) with the same call on the CPU device, i.e. the CPU kernel,
which is bit-exact with the pure-JAX reference (tests/kernels/test_mxfp8_kernel.py). If the
CPU library predates the MXFP8 kernel, the expected bytes come from `impl="reference"` on the
CPU instead; without a CPU backend (`JAX_PLATFORMS=cuda`), from `impl="reference"` on the GPU.
The expected bytes of a case are computed once, for ROWWISE_COLWISE, and serve the GPU calls of
the three layouts (a part's bytes do not depend on the layout).

The shapes reach every kernel path: the tile kernel with rowwise and colwise, rowwise only (the
flat stream kernel: whole and partial warps, scale words and single scale bytes), colwise only with
16-byte staged stores and with 8/4-byte
stores (rows not a multiple of 16 bytes), and the scalar kernels (L % 32 != 0, rows not a
multiple of 16 input bytes), partial K and L blocks, C > 1, A > 1, strips of 512 columns (the
tile kernel's staged scale bytes) and empty tensors.
"""

import functools
import textwrap

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import eqx_quant as eqq
from eqx_quant._ops.mxfp8_quantize import Mxfp8QuantizeParams, mxfp8_quantize_op
from tests.support.bytes import assert_same_bytes
from tests.support.cuda import (
    CUDA,
    assert_graph_replay_matches,
    expected_device_and_impl,
    outputs_of,
    requires_cuda,
    spread_random,
)
from tests.support.dtypes import Q_DTYPES, X_DTYPES

pytestmark = requires_cuda("mxfp8_quantize")

LAYOUTS = (
    eqq.QuantizeLayout.ROWWISE,
    eqq.QuantizeLayout.COLWISE,
    eqq.QuantizeLayout.ROWWISE_COLWISE,
)


@functools.cache
def _jitted(q_name, layout, flatten_axis, impl, vmapped):
    quantizer = eqq.BlockScaleQuantizer(Q_DTYPES[q_name], layout)

    def one(x):
        return eqq.quantize(x, quantizer, flatten_axis, impl=impl)

    return jax.jit(jax.vmap(one) if vmapped else one)


def _arrays(tensor):
    """{name: uint8 numpy array} of every output of a quantize call."""
    out = {}
    for name in ("rowwise", "colwise"):
        part = getattr(tensor, name)
        if part is None:
            continue
        out[name] = np.asarray(part.data)
        out[name + ".scale_inv"] = np.asarray(part.scale_inv)
        out[name + ".amax"] = np.asarray(part.amax)
    return out


def _check(x_np, q_name, flatten_axis=-1, vmapped=False, layouts=LAYOUTS):
    """GPU impl="ffi" == the expected bytes, for each layout."""
    per_example_rank = x_np.ndim - (1 if vmapped else 0)
    if per_example_rank < 2:  # no colwise blocks without an axis before the last
        layouts = tuple(lay for lay in layouts if not lay.has_colwise)
    full = (
        eqq.QuantizeLayout.ROWWISE_COLWISE
        if per_example_rank >= 2
        else eqq.QuantizeLayout.ROWWISE
    )
    device, impl = expected_device_and_impl(("mxfp8_quantize",), CUDA)
    with jax.default_device(device):
        x_ref = jax.device_put(x_np, device)
        want = _arrays(_jitted(q_name, full, flatten_axis, impl, vmapped)(x_ref))
    x_gpu = jax.device_put(x_np, CUDA)
    for layout in layouts:
        with jax.default_device(CUDA):
            got = _arrays(_jitted(q_name, layout, flatten_axis, "ffi", vmapped)(x_gpu))
        what = (
            f"x {x_np.dtype}{list(x_np.shape)} fa={flatten_axis} {q_name} {layout.name} "
            f"vmap={vmapped} (expected: {impl} on {device.platform})"
        )
        keys = outputs_of(want, layout)
        assert set(got) == keys, f"{what}: outputs {sorted(got)}"
        for key in got:
            assert_same_bytes(got[key], want[key], f"{what}: {key}")


SHAPES = [
    ((32, 64), -1, "bf16", "e4m3"),
    ((32, 64), -1, "f32", "e5m2"),
    ((2, 64, 32), -1, "f16", "e4m3"),
    ((64, 2, 32), -2, "bf16", "e5m2"),  # K=64, C=2, L=32
    ((32, 256, 128), -1, "bf16", "e4m3"),  # A=32, K=256
    ((32, 256, 128), -2, "f32", "e4m3"),  # K=32, C=256, L=128
    ((7, 13), -1, "bf16", "e4m3"),  # scalar kernels
    ((1, 7), -1, "f16", "e5m2"),
    ((33, 65), -1, "f32", "e4m3"),
    ((33, 65), -1, "bf16", "e5m2"),
    ((3, 5, 40), -2, "bf16", "e4m3"),  # K=3, W=200: 8-byte stores; rowwise scalar
    ((3, 5, 40), -2, "f32", "e5m2"),  # 4-byte stores
    ((64, 24), -1, "f16", "e4m3"),  # W=24: not 16-byte rows
    ((40, 48), -1, "bf16", "e4m3"),  # staged colwise, rowwise scalar
    ((37, 1001), -1, "bf16", "e4m3"),
    ((37, 1001), -1, "f32", "e5m2"),
    ((0, 5), -1, "bf16", "e4m3"),
    ((5, 0), -1, "f32", "e4m3"),
    ((2, 0, 64), -2, "f16", "e4m3"),
    ((4096, 4096), -1, "bf16", "e4m3"),
    ((8192, 1024), -1, "bf16", "e5m2"),
    ((2, 96, 64), -1, "f16", "e5m2"),
    ((2, 96, 64), -1, "f32", "e4m3"),
    ((4, 100, 64), -2, "bf16", "e4m3"),  # K=4, C=100
    ((2, 40, 3, 64), -2, "bf16", "e5m2"),  # A=2, K=40 (partial block), C=3
    ((2, 40, 3, 64), -2, "f32", "e4m3"),
    ((2, 40, 4, 256), -2, "bf16", "e4m3"),  # strips (W % 512 == 0): A=2, partial K block
    ((2, 40, 4, 256), -2, "f32", "e5m2"),  # strips of 4 f32 tiles
    ((72, 2048), -1, "f16", "e5m2"),  # four strips per row block, partial K block
    ((40, 1536), -1, "bf16", "e4m3"),  # strips of 512 columns, W % 1024 != 0
    ((2, 64, 512), -1, "f32", "e5m2"),  # one strip of 4 f32 tiles per row block
    ((5, 96), -1, "bf16", "e4m3"),  # flat rowwise: a partial last pseudo-row
    ((3, 96), -1, "f32", "e4m3"),
    ((96,), -1, "bf16", "e5m2"),  # rank 1: rowwise only
    ((100,), -1, "f32", "e4m3"),
]


@pytest.mark.parametrize(
    "shape,flatten_axis,x_name,q_name", SHAPES, ids=[f"{s}-{fa}-{x}-{q}" for s, fa, x, q in SHAPES]
)
def test_shapes(shape, flatten_axis, x_name, q_name):
    x = spread_random(shape, X_DTYPES[x_name], seed=len(shape) * 1000 + sum(shape))
    _check(x, q_name, flatten_axis)


@pytest.mark.parametrize("x_name", sorted(X_DTYPES))
@pytest.mark.parametrize("q_name", sorted(Q_DTYPES))
def test_dtypes(x_name, q_name):
    """Every input x FP8 type on a tile-kernel shape (rowwise in the tile) and a scalar one."""
    _check(spread_random((64, 3, 96), X_DTYPES[x_name], seed=5), q_name, flatten_axis=-2)
    _check(spread_random((45, 70), X_DTYPES[x_name], seed=6), q_name)


@pytest.mark.parametrize("q_name", sorted(Q_DTYPES))
@pytest.mark.parametrize("kind", ["bf16", "f16"])
def test_all_16bit_patterns(kind, q_name):
    """All 65536 bit patterns (NaNs, infinities, subnormals, both zeros), in order (blocks of
    neighbouring patterns) and shuffled (NaNs and infinities inside ordinary blocks)."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    dtype = ml_dtypes.bfloat16 if kind == "bf16" else np.float16
    _check(bits.reshape(512, 128).view(dtype), q_name)
    shuffled = np.random.default_rng(11).permutation(bits)
    _check(shuffled.reshape(512, 128).view(dtype), q_name)
    _check(shuffled.reshape(64, 1024).view(dtype), q_name)  # staged scales of whole strips


def _special_values():
    """(64, 96) f32: whole blocks (rowwise and colwise) of special cases."""
    rng = np.random.default_rng(7)
    sub = np.array([1, 2, 3, 0x7FFFFF, 0x400000, 0x123456], np.uint32).view(np.float32)
    specials = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, -448.0, 464.0, 480.0, 57344.0, 61440.0,
         -61441.0, 2.0**-9, 2.0**-10, 3 * 2.0**-11, 1.0625, 1.1875, 240.0, 232.0, 3.4e38,
         -3.4e38, 65504.0, 2.0**-118, 1.5 * 2.0**-118, 2.0**-117, 2.0**-126, 2.0**-127],
        np.float32,
    )
    x = rng.standard_normal((64, 96)).astype(np.float32)
    x[0:8] = rng.choice(np.concatenate([specials, sub]), size=(8, 96))
    x[8, :32] = np.nan  # a block of NaNs only: amax 0
    x[9, :32] = 0.0
    x[9, 32:64] = -0.0
    x[10, :32] = rng.choice(sub, 32) * rng.choice([-1.0, 1.0], 32).astype(np.float32)
    x[11, :32] = np.inf  # E = 0xFE, factor 2^-127 (an f32 subnormal)
    x[11, 1] = 3.0e38
    x[11, 2] = -1.5
    x[12, :32] = 1.5 * 2.0**-118  # v subnormal in (2^-127, 2^-126): E = 1
    x[13, :32] = 448.0 * 2.0**-127
    x[14, :] = 3.4e38
    x[15, :] = -np.inf
    x[16:48, 40] = np.nan  # colwise: one column of NaNs, one with subnormals only
    x[16:48, 41] = rng.choice(sub, 32)
    x[16:48, 42] = np.inf
    x[16:48, 43] = 1.5 * 2.0**-118
    x[48:64, :] *= np.float32(2.0**-120)
    bits = x.view(np.uint32)
    bits[20, 50:58] = [0x7F800001, 0xFF800001, 0x7FC00001, 0xFFFFFFFF, 1, 0x80000001, 0, 0x80000000]
    return x


@pytest.mark.parametrize("x_name", sorted(X_DTYPES))
def test_special_values(x_name):
    with np.errstate(over="ignore", invalid="ignore"):  # f16 / bf16 overflow to inf
        x = _special_values().astype(np.dtype(X_DTYPES[x_name]))
    for q_name in Q_DTYPES:
        _check(x, q_name)
        _check(x.reshape(64, 3, 32), q_name, flatten_axis=-2)  # C = 3


def test_vmap():
    """A leading vmapped batch: each example is blocked alone (batch folded into A)."""
    x = spread_random((3, 64, 96), jnp.bfloat16, seed=3)
    x[1] *= 100
    _check(x, "e4m3", vmapped=True)
    x32 = spread_random((2, 40, 3, 32), jnp.float32, seed=4)
    _check(x32, "e5m2", flatten_axis=-2, vmapped=True)
    _check(spread_random((3, 33, 20), jnp.float16, seed=8), "e4m3", vmapped=True)


@functools.cache
def _jitted_dbias(q_name, layout, flatten_axis, impl, vmapped):
    quantizer = eqq.BlockScaleQuantizer(Q_DTYPES[q_name], layout)

    def one(x):
        return eqq.quantize_dbias(x, quantizer, flatten_axis, impl=impl)

    jitted = jax.jit(jax.vmap(one) if vmapped else one)

    def run(x):
        tensor, dbias = jitted(x)
        return _arrays(tensor) | {"dbias": np.asarray(dbias)}

    return run


# (shape, flatten_axis, x, q, vmapped). Rowwise: the column tree sums writing the rowwise
# blocks in their read (one long reduced axis, L % 32 == 0: node sums of 64, 32, 4 and 1 rows,
# a batch, a leading axis of 1, more columns than one slab, f32's 8 lanes per block, columns
# over two axes). Both layouts: the tile kernel writing the sums of its 32-row blocks when
# K = 32 * 2^j (256, 128, 1024 and 1 nodes, strips of 512 columns, a batch), else the tree
# sums after the MXFP8 kernel. (batch, sequence, hidden) with a power-of-two batch: merged
# into one axis of rows (8192: 256 nodes); with a batch of 3, not. The fallbacks: L % 32 != 0 (the
# MXFP8 kernel, then the sums;
# both layouts: 2 block nodes summed by the tree kernel), a nested tree (the FP8 op's
# dbias-only form: its walk), no rows (zero sums).
DBIAS_CASES = [
    ((8192, 256), -1, "bf16", "e4m3", False),
    ((4096, 1024), -1, "bf16", "e5m2", False),
    ((96, 64), -1, "f16", "e4m3", False),
    ((100, 96), -1, "f32", "e4m3", False),
    ((37, 320), -1, "bf16", "e5m2", False),
    ((1, 200, 64), -1, "bf16", "e4m3", False),
    ((3, 128, 96), -1, "bf16", "e4m3", True),
    ((64, 48), -1, "bf16", "e4m3", False),
    ((5, 7, 64), -1, "f32", "e4m3", False),
    ((6, 2, 64), 1, "bf16", "e4m3", False),
    ((0, 64), -1, "bf16", "e4m3", False),
    ((32768, 64), -1, "f32", "e5m2", False),
    ((32, 96), -1, "f16", "e4m3", False),
    ((2048, 1024), -1, "bf16", "e4m3", False),
    ((4, 2048, 256), -1, "bf16", "e4m3", False),
    ((3, 64, 128), -1, "f16", "e5m2", False),
]


@pytest.mark.parametrize(
    "shape,flatten_axis,x_name,q_name,vmapped",
    DBIAS_CASES,
    ids=[f"{s}-{fa}-{x}-{q}-{v}" for s, fa, x, q, v in DBIAS_CASES],
)
def test_quantize_dbias(shape, flatten_axis, x_name, q_name, vmapped):
    """quantize_dbias: the tensor and the dbias (the fused kernel's node sums, finished and
    cast) on the GPU == on the CPU, byte for byte, for every layout."""
    x_np = np.array(spread_random(shape, X_DTYPES[x_name], seed=sum(shape)))
    if shape[-2] > 1:
        x_np[..., 1, :] = -x_np[..., 0, :]  # rows that cancel: zero and tiny partial sums
    _check_dbias(x_np, q_name, flatten_axis, vmapped)


@pytest.mark.parametrize("x_name", sorted(X_DTYPES))
def test_quantize_dbias_special_values(x_name):
    """NaN, infinities, subnormals, signed zeros and the largest values in the fused kernel's
    blocks and sums (one row per dbias node: 64 rows, split 64)."""
    with np.errstate(over="ignore", invalid="ignore"):
        x = _special_values().astype(np.dtype(X_DTYPES[x_name]))
    for q_name in Q_DTYPES:
        _check_dbias(x, q_name, -1, False)


# (rows, cols, x, colwise): the tile kernel writing the sums of its 32-row blocks, then the
# finish of 2 to 1024 of them (8 or 32 slices). Rowwise only: 256 and 512 blocks under 256
# and 128 columns (no strips), strips of 512 columns (1536 bf16, 512 f32), f32 tiles half
# outside the 64 columns (1024 blocks), f16; both layouts for comparison.
NODE_CASES = [
    (8192, 256, "bf16", False),
    (16384, 128, "bf16", False),
    (1024, 1536, "bf16", False),
    (256, 512, "f32", False),
    (32768, 64, "f32", False),
    (64, 96, "f16", False),
    (2048, 1024, "bf16", True),
]


@pytest.mark.parametrize(
    "rows,cols,x_name,colwise",
    NODE_CASES,
    ids=[f"{r}x{c}-{x}-{'rowcol' if cw else 'row'}" for r, c, x, cw in NODE_CASES],
)
def test_block_node_sums(rows, cols, x_name, colwise):
    """The inner primitive's 32-row block node sums (split = rows / 32), its cast node 0 and
    its MXFP8 bytes on the GPU == on the CPU, byte for byte; the input's first 64 rows are the
    special values (NaN, infinities, subnormals, signed zeros, the largest values)."""
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.array(spread_random((rows, cols), X_DTYPES[x_name], seed=rows + cols))
        special = _special_values().astype(x.dtype)
        x[: min(rows, 64), : min(cols, 96)] = special[: min(rows, 64), : min(cols, 96)]
    params = dict(
        q_dtype="float8_e4m3fn", flatten_axis=1, rowwise=True, colwise=colwise,
        with_dbias=True, dbias_split=rows // 32, dbias_cast=True,
    )
    device, impl = expected_device_and_impl(("mxfp8_quantize", "fp8_quantize"), CUDA)

    def run(where, impl):
        p = Mxfp8QuantizeParams(impl=impl, **params)
        with jax.default_device(where):
            fn = jax.jit(lambda v: mxfp8_quantize_op.bind_inner(v, params=p))
            return [np.asarray(o) for o in fn(jax.device_put(x, where))]

    want = run(device, impl)
    got = run(CUDA, "ffi")
    assert got[4].shape == (rows // 32, cols)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_same_bytes(g, w, f"{rows}x{cols} {x_name} colwise={colwise}: output {k}")


def _check_dbias(x_np, q_name, flatten_axis, vmapped):
    """GPU quantize_dbias(impl="ffi") == the expected bytes, for each layout."""
    shape = x_np.shape
    device, impl = expected_device_and_impl(("mxfp8_quantize", "fp8_quantize"), CUDA)
    full = eqq.QuantizeLayout.ROWWISE_COLWISE
    with jax.default_device(device):
        want = _jitted_dbias(q_name, full, flatten_axis, impl, vmapped)(
            jax.device_put(x_np, device)
        )
    x_gpu = jax.device_put(x_np, CUDA)
    for layout in LAYOUTS:
        with jax.default_device(CUDA):
            got = _jitted_dbias(q_name, layout, flatten_axis, "ffi", vmapped)(x_gpu)
        what = f"x {x_np.dtype}{list(shape)} fa={flatten_axis} {q_name} {layout.name}"
        assert set(got) == outputs_of(want, layout), f"{what}: outputs {sorted(got)}"
        for key in got:
            assert_same_bytes(got[key], want[key], f"{what}: {key}")


_GRAPH_CODE = textwrap.dedent(
    """
    import hashlib
    import jax, jax.numpy as jnp, numpy as np
    import eqx_quant as eqq

    def run():
        x = jnp.asarray(np.random.default_rng(1).standard_normal((512, 384)) * 3, jnp.bfloat16)
        out = []
        for layout in (eqq.QuantizeLayout.ROWWISE, eqq.QuantizeLayout.ROWWISE_COLWISE):
            q = eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, layout)
            f = jax.jit(lambda x: eqq.quantize(jnp.sin(x) * 2, q, impl="ffi"))
            g = jax.jit(lambda x: eqq.quantize(x[:, :-7] + 1, q, impl="ffi"))
            for _ in range(3):  # the first run records the graph, later ones replay it
                out.append(f(x))
                out.append(g(x))
        h = hashlib.sha256()
        for leaf in jax.tree.leaves(out):
            h.update(np.asarray(leaf).tobytes())
        return h.hexdigest()
    """
)


def test_cuda_graphs_give_the_same_bytes():
    """Under XLA command buffers with every op captured (--xla_gpu_graph_min_graph_size=1;
    the handler is kCmdBufferCompatible) the bytes equal those of this process."""
    assert_graph_replay_matches(_GRAPH_CODE, CUDA)
