"""The NVFP4 CUDA kernels (`eqx_quant_nvfp4_amax_cuda`, `eqx_quant_nvfp4_quantize_cuda`) against
the CPU kernels, byte for byte.

Runs only where a CUDA device and eqx_quant's CUDA NVFP4 kernels are present (otherwise skipped
with a reason that mentions CUDA, which `EQX_QUANT_REQUIRE_CUDA=1` turns into a failure).

Every case quantizes x with `eqx_quant.quantize(x, NVFP4Quantizer(...), fa, key=..., impl="ffi")`
on the GPU and compares every output with the same call on the CPU device (the CPU kernels, which
are bit-exact with the pure-JAX reference: tests/kernels/test_nvfp4_kernel.py): the E2M1 codes
(`reference.nvfp4.e2m1_codes`), the E4M3 scale bytes and the bits of each part's amax (the
global amax of the amax op; post-RHT for an RHT colwise part). If the CPU library lacks the NVFP4
kernels the expected bytes come from `impl="reference"` on the CPU; without a CPU backend
(`JAX_PLATFORMS=cuda`), from `impl="reference"` on the GPU. The expected bytes of a case are
computed once, for the fullest layout, and serve the GPU calls of every layout (a part's bytes do
not depend on the layout).

The shapes reach every kernel path: RowHalfKernel (rowwise only, L % 16 == 0, bf16 / f16 without
stochastic rounding: several steps per CTA, a partial last step, NaN steps, the paired and the
unpaired encoder: a finite bf16 global amax above 6 x 2^123 takes the latter), RowHalfSrKernel
(the same with stochastic rounding: linear and general SR indices, NaN steps), RowFastKernel (the
same for f32), RowScalarKernel (L % 16 != 0, rank 1), TileKernel with cp.async rows and with scalar
loads (L not a multiple of
a 16-byte vector), partial K and L blocks and tiles, C > 1, A > 1, several tiles per CTA, empty
tensors; PanelKernel (1D colwise with K % 16 == 0 and L % 16 == 0: with and without the RHT and
stochastic rounding, rowwise optional; partial panel and vector groups); AmaxKernel and
RhtAmaxKernel (16-byte column vectors and single columns); 1D, 2D, RHT and
stochastic rounding, alone and combined; vmapped batches (per-example amax, key). The raw op
(`jax.ffi.ffi_call`, GPU target vs CPU target) covers what the public API does not reach
unsharded: stochastic-rounding indices of a shard (offset, global shape; rowwise in x, colwise
in the T layout), indices >= 2^32 and >= 2^35 (the octet counter's high word), the wrap of the
octet counter's low word inside a block and the 32-bit wrap of s + offset. A subprocess
replays the ops under CUDA graphs.
"""

import functools
import textwrap

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import eqx_quant as eqq
from eqx_quant.reference import nvfp4 as nv_ref
from tests.support.bytes import assert_same_bytes, u8
from tests.support.cuda import (
    CUDA,
    assert_graph_replay_matches,
    expected_device_and_impl,
    outputs_of,
    requires_cuda,
    spread_random,
)
from tests.support.dtypes import X_DTYPES
from tests.support.kernels import ffi_target

OPS = ("nvfp4_amax", "nvfp4_quantize")
pytestmark = requires_cuda(*OPS)

L = eqq.QuantizeLayout
LAYOUTS = (L.ROWWISE, L.COLWISE, L.ROWWISE_COLWISE)
# The row kernels and the tile kernel (rowwise and colwise in one pass): the tests other than
# test_shapes use these two layouts only, to keep the number of compilations down.
TWO = (L.ROWWISE, L.ROWWISE_COLWISE)
MODES = {  # name: (use_2d, use_rht, stochastic_rounding)
    "1d": (False, False, False),
    "2d": (True, False, False),
    "rht": (False, True, False),
    "sr": (False, False, True),
    "2d_sr": (True, False, True),
    "rht_sr": (False, True, True),
}


def _bytes(tensor):
    """{name: uint8 / uint32 array} of every output of a quantize call."""
    out = {}
    for name in ("rowwise", "colwise"):
        part = getattr(tensor, name)
        if part is None:
            continue
        out[name] = nv_ref.e2m1_codes(part.data)
        out[name + ".scale_inv"] = lax.bitcast_convert_type(part.scale_inv, jnp.uint8)
        out[name + ".amax"] = lax.bitcast_convert_type(part.amax, jnp.uint32)
    return out


@functools.cache
def _jitted(layout, flatten_axis, mode, impl, vmapped):
    use_2d, use_rht, sr = MODES[mode]
    quantizer = eqq.NVFP4Quantizer(
        q_layout=layout, use_2d=use_2d, use_rht=use_rht, stochastic_rounding=sr
    )

    def one(x, key):
        return _bytes(eqq.quantize(x, quantizer, flatten_axis, key=key if sr else None, impl=impl))

    return jax.jit(jax.vmap(one) if vmapped else one)


def _keys(seed, vmapped, batch):
    key = jax.random.key(seed)
    return jax.random.split(key, batch) if vmapped else key


def _check(x_np, flatten_axis=-1, mode="1d", layouts=LAYOUTS, vmapped=False, seed=0):
    """GPU impl="ffi" == the expected bytes, for each layout."""
    _, use_rht, _ = MODES[mode]
    per_example_rank = x_np.ndim - (1 if vmapped else 0)
    if per_example_rank < 2:  # no colwise blocks without an axis before the last
        layouts = tuple(lay for lay in layouts if not lay.has_colwise)
    if use_rht:  # the RHT applies to a colwise part only
        layouts = tuple(lay for lay in layouts if lay.has_colwise)
    full = L.ROWWISE_COLWISE if per_example_rank >= 2 else L.ROWWISE
    keys = _keys(seed, vmapped, x_np.shape[0] if vmapped else 1)
    device, impl = expected_device_and_impl(OPS, CUDA)
    with jax.default_device(device):
        want = _jitted(full, flatten_axis, mode, impl, vmapped)(
            jax.device_put(x_np, device), jax.device_put(keys, device)
        )
        want = {k: np.asarray(v) for k, v in want.items()}
    x_gpu = jax.device_put(x_np, CUDA)
    keys_gpu = jax.device_put(keys, CUDA)
    for layout in layouts:
        with jax.default_device(CUDA):
            got = _jitted(layout, flatten_axis, mode, "ffi", vmapped)(x_gpu, keys_gpu)
            got = {k: np.asarray(v) for k, v in got.items()}
        what = (
            f"x {x_np.dtype}{list(x_np.shape)} fa={flatten_axis} {mode} {layout.name} "
            f"vmap={vmapped} (expected: {impl} on {device.platform})"
        )
        names = outputs_of(want, layout)
        assert set(got) == names, f"{what}: outputs {sorted(got)}"
        for name in got:
            assert_same_bytes(got[name], want[name], f"{what}: {name}")


SHAPES = [
    ((32, 64), -1, "bf16", ("1d", "2d", "rht", "sr")),  # A=1, K=32, L=64
    ((32, 64), -1, "f32", ("1d", "2d", "rht_sr")),
    ((2, 64, 32), -1, "f16", ("1d", "2d", "rht")),  # A=2
    ((64, 2, 32), -2, "bf16", ("1d", "2d", "rht", "2d_sr")),  # K=64, C=2, L=32
    ((32, 256, 128), -1, "bf16", ("1d", "rht", "sr")),  # A=32, K=256
    ((32, 256, 128), -2, "f32", ("1d", "2d", "rht")),  # K=32, C=256, L=128
    ((7, 13), -1, "bf16", ("1d", "2d", "sr", "2d_sr")),  # scalar rows, scalar tile loads
    ((7, 13), -1, "f32", ("1d", "2d")),
    ((33, 65), -1, "f32", ("1d", "2d", "sr")),  # partial K and L blocks and tiles
    ((33, 65), -1, "f16", ("1d", "2d")),
    ((16, 48), -1, "bf16", ("1d", "rht", "rht_sr")),
    ((32, 13), -1, "bf16", ("rht",)),  # RhtAmaxKernel with single columns
    ((32, 13), -1, "f32", ("rht",)),
    ((64, 2048), -1, "bf16", ("1d", "2d", "rht", "sr")),  # several tiles per CTA
    ((64, 2048), -1, "f32", ("rht",)),
    ((3, 32, 40), -2, "bf16", ("1d", "2d", "sr")),  # K=3, C=32, L=40
    ((3, 32, 40), -2, "f32", ("1d", "2d")),
    ((3, 5, 36), -2, "bf16", ("1d", "2d")),  # L=36: scalar tile loads, C=5
    ((2, 40, 3, 64), -2, "f16", ("1d", "2d", "sr")),  # A=2, K=40 (partial), C=3
    ((2, 48, 3, 64), -2, "bf16", ("rht", "rht_sr")),
    ((13,), -1, "bf16", ("1d", "sr")),  # rank 1: rowwise only
    ((100,), -1, "f32", ("1d",)),
    ((5, 96), -1, "bf16", ("1d",)),
    ((0, 16), -1, "bf16", ("1d", "2d")),
    ((16, 0), -1, "f32", ("1d",)),
    ((2, 0, 64), -2, "f16", ("1d",)),
    # PanelKernel grids with a partial last panel group (K = 208: 13 panels) and vector group
    # (W = 560: 70 bf16 / 140 f32 vectors), C = 5.
    ((208, 5, 112), -2, "bf16", ("1d", "rht")),
    ((208, 5, 112), -2, "f32", ("rht",)),
    ((8192, 1024), -1, "bf16", ("1d", "rht")),
    ((4096, 4096), -1, "bf16", ("1d", "2d", "sr")),
    # RowHalfSrKernel takes up to 4 steps per CTA, fewer when that would leave SMs idle: here
    # 4 steps per CTA (1296 steps) with a partial last step (1326510 vectors)
    ((2601, 4080), -1, "bf16", ("sr",)),
]
CASES = [(s, fa, x, m) for s, fa, x, modes in SHAPES for m in modes]


@pytest.mark.parametrize(
    "shape,flatten_axis,x_name,mode", CASES, ids=[f"{s}-{fa}-{x}-{m}" for s, fa, x, m in CASES]
)
def test_shapes(shape, flatten_axis, x_name, mode):
    x = spread_random(shape, X_DTYPES[x_name], seed=len(shape) * 1000 + sum(shape))
    _check(x, flatten_axis, mode, seed=sum(shape))


@pytest.mark.parametrize("x_name", sorted(X_DTYPES))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_dtypes(x_name, mode):
    """Every input type x mode on a tile-kernel shape with C > 1 and a fast-rowwise one."""
    _check(spread_random((64, 3, 96), X_DTYPES[x_name], seed=5), -2, mode, TWO, seed=5)
    _check(spread_random((48, 160), X_DTYPES[x_name], seed=6), -1, mode, TWO, seed=6)


@pytest.mark.parametrize("x_name", ["bf16", "f16"])
@pytest.mark.parametrize("mode", ["1d", "sr"])
def test_row_half_whole_and_partial_steps(x_name, mode):
    """RowHalfKernel / RowHalfSrKernel (16-bit, rowwise): 2113 x 2048 values are 529 steps of
    1024 vectors. Without SR, one more than the kernel's wave of 4 CTAs per SM on an H200 (528),
    so CTA 0 takes a whole step and then the example's partial last one (80 vectors); with SR,
    265 CTAs of at most 2 steps (3 CTAs per SM), CTA 263 taking step 263 and the partial
    one."""
    x = spread_random((2113, 2048), X_DTYPES[x_name], seed=21)
    _check(x, -1, mode, (L.ROWWISE,), seed=21)


@pytest.mark.parametrize("kind", ["bf16", "f16"])
def test_all_16bit_patterns(kind):
    """All 65536 bit patterns (NaNs, infinities, subnormals, both zeros), in order (blocks of
    neighbouring patterns) and shuffled (NaNs and infinities inside ordinary blocks)."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    dtype = ml_dtypes.bfloat16 if kind == "bf16" else np.float16
    shuffled = np.random.default_rng(11).permutation(bits)
    for x in (bits.reshape(512, 128).view(dtype), shuffled.reshape(512, 128).view(dtype)):
        for mode in ("1d", "2d", "rht", "sr"):
            _check(x, -1, mode, TWO)
    # Finite patterns only: a finite amax (the inf above makes the global scale 1).
    finite = bits[np.isfinite(bits.view(dtype).astype(np.float32))]
    finite = np.resize(np.random.default_rng(12).permutation(finite), 512 * 128)
    _check(finite.reshape(512, 128).view(dtype), -1, "1d", TWO)
    _check(finite.reshape(512, 128).view(dtype), -1, "rht", TWO)


def _special_values():
    """(64, 96) f32: whole blocks (rowwise and colwise) of special cases."""
    rng = np.random.default_rng(7)
    sub = np.array([1, 2, 3, 0x7FFFFF, 0x400000, 0x123456], np.uint32).view(np.float32)
    specials = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 6.0, -6.0, 5.0, 5.5, 0.25, 0.75, 1.25, 1.75, 2.5,
         3.5, 448.0, 2688.0, 3.4e38, -3.4e38, 65504.0, 2.0**-118, 2.0**-126, 2.0**-127],
        np.float32,
    )
    x = rng.standard_normal((64, 96)).astype(np.float32)
    x[0:8] = rng.choice(np.concatenate([specials, sub]), size=(8, 96))
    x[8, :16] = np.nan  # a block of NaNs only: block amax 0
    x[9, :16] = 0.0
    x[9, 16:32] = -0.0
    x[10, :16] = rng.choice(sub, 16) * rng.choice([-1.0, 1.0], 16).astype(np.float32)
    x[11, :16] = np.inf
    x[11, 1] = 3.0e38
    x[11, 2] = -1.5
    x[12, :16] = -np.inf
    x[14, :] = 3.4e38
    x[16:48, 40] = np.nan  # colwise: a column of NaNs, of subnormals, of infinities, of zeros
    x[16:48, 41] = rng.choice(sub, 32)
    x[16:48, 42] = np.inf
    x[16:32, 43] = -0.0
    x[16:32, 44] = 0.0
    x[48:64, :] *= np.float32(2.0**-120)
    bits = x.view(np.uint32)
    bits[20, 50:58] = [0x7F800001, 0xFF800001, 0x7FC00001, 0xFFFFFFFF, 1, 0x80000001, 0, 0x80000000]
    return x


@pytest.mark.parametrize("x_name", sorted(X_DTYPES))
def test_special_values(x_name):
    with np.errstate(over="ignore", invalid="ignore"):  # f16 / bf16 overflow to inf
        x = _special_values().astype(np.dtype(X_DTYPES[x_name]))
    finite = np.where(np.isfinite(x), x, np.zeros_like(x))
    for mode in ("1d", "2d", "rht", "sr"):
        _check(x, -1, mode, TWO)
        _check(x.reshape(64, 3, 32), -2, mode, TWO)  # C = 3
        _check(finite, -1, mode, TWO)  # a finite global amax


@pytest.mark.parametrize("mode", ["1d", "2d", "rht", "sr"])
def test_global_amax_edges(mode):
    """amax 0 (all zeros, all NaN, zeros of both signs), amax inf, amax at the f32 extremes."""
    zeros = np.zeros((32, 48), np.float32)
    signed = zeros.copy()
    signed[::2] = -0.0
    nans = np.full((32, 48), np.nan, np.float32)
    infs = spread_random((32, 48), jnp.float32, seed=9)
    infs[3, 5] = np.inf
    infs[17, 40] = -np.inf
    huge = spread_random((32, 48), jnp.float32, seed=10) * np.float32(4e33)  # max |x| ~1e38
    tiny = (spread_random((32, 48), jnp.float32, seed=11) * np.float32(2.0**-140)).astype(
        np.float32
    )
    for x in (zeros, signed, nans, infs, huge, tiny):
        _check(x, -1, mode, TWO)
        _check(x.astype(jnp.bfloat16), -1, mode, TWO)


@pytest.mark.parametrize("mode", ["1d", "2d", "rht", "sr", "rht_sr"])
def test_vmap(mode):
    """A leading vmapped batch: each example has its own amax (and key) and is blocked alone."""
    x = spread_random((3, 64, 96), jnp.bfloat16, seed=3)
    x[1] *= 100
    x[2] = 0
    _check(x, -1, mode, TWO, vmapped=True, seed=3)
    x32 = spread_random((2, 48, 3, 32), jnp.float32, seed=4)
    x32[0, 5, 1, 7] = np.inf
    _check(x32, -2, mode, TWO, vmapped=True, seed=4)
    if mode not in ("rht", "rht_sr"):  # K = 33
        _check(spread_random((3, 33, 20), jnp.float16, seed=8), -1, mode, TWO, vmapped=True, seed=8)
    if mode in ("1d", "sr"):  # rank-1 examples: rowwise only
        _check(spread_random((4, 40), jnp.bfloat16, seed=2), -1, mode, TWO, vmapped=True, seed=2)
    # Packed f4 outputs: 91-element examples start on alternating nibbles (nibble stores
    # shared by two blocks / examples); 16- and 64-element examples are the fast row kernel's
    # example alignment cases (8 or 32 bytes of codes apart).
    if mode not in ("rht", "rht_sr"):  # K = 7
        _check(spread_random((3, 7, 13), jnp.bfloat16, seed=9), -1, mode, TWO, vmapped=True, seed=9)
    if mode in ("1d", "sr"):
        for shape, dtype in (((3, 16), jnp.bfloat16), ((3, 16), jnp.float32),
                             ((5, 2, 32), jnp.bfloat16)):
            _check(spread_random(shape, dtype, seed=12), -1, mode, TWO, vmapped=True, seed=12)


def _ffi_quantize(platform, x, amax, col_amax, key, offset, global_shape, *, n_batch, fa,
                  rowwise, colwise, use_2d, use_rht, sr):
    """The raw eqx_quant_nvfp4_quantize_<platform> op on arrays of that platform: its
    float4_e2m1fn / float8_e4m3fn outputs as uint8 codes / scale bytes (`np.asarray` unpacks
    the packed f4 buffers, so this reads what the kernel packed)."""
    batch, s = x.shape[:n_batch], x.shape[n_batch:]
    lb, kb = -(-s[-1] // 16), -(-s[fa - 1] // 16)
    shapes = (
        batch + s if rowwise else (0,),
        batch + s[:-1] + (lb,) if rowwise else (0,),
        batch + s[fa:] + s[:fa] if colwise else (0,),
        batch + s[fa:] + s[: fa - 1] + (kb,) if colwise else (0,),
    )
    call = jax.ffi.ffi_call(
        ffi_target("nvfp4_quantize", platform),
        tuple(jax.ShapeDtypeStruct(sh, dt) for sh, dt in zip(shapes, _OUT_DTYPES)),
        vmap_method=None,
    )
    out = call(
        x, amax, col_amax, key, offset,
        n_batch=np.int64(n_batch),
        block_axis=np.int64(n_batch + fa - 1),
        rowwise=bool(rowwise),
        colwise=bool(colwise),
        use_2d=bool(use_2d),
        use_rht=bool(use_rht),
        rht_sign_mask=np.int64(0xD7E8),
        stochastic_rounding=bool(sr),
        global_shape=np.asarray(global_shape, np.int64),
    )
    return [u8(o) for o in out]


def _raw_op_gpu_and_cpu(args, global_shape, **flags):
    """The raw op's outputs on the GPU and on the CPU (its CPU kernels: skips without them)."""
    device, impl = expected_device_and_impl(OPS, CUDA)
    if impl != "ffi":
        pytest.skip("needs the CPU NVFP4 kernels for the expected bytes")
    with jax.default_device(device):
        want = _ffi_quantize("cpu", *[jax.device_put(a, device) for a in args],
                             global_shape, **flags)
    with jax.default_device(CUDA):
        got = _ffi_quantize("cuda", *[jax.device_put(a, CUDA) for a in args],
                            global_shape, **flags)
    return got, want


# The raw op's outputs: row, row_scale, col, col_scale.
_OUT_DTYPES = (jnp.float4_e2m1fn, jnp.float8_e4m3fn, jnp.float4_e2m1fn, jnp.float8_e4m3fn)


# (x shape with n_batch leading dims, n_batch, fa, offset, global shape, use_2d, use_rht)
SHARDED = [
    ((33, 40), 0, 1, (5, 7), (100, 64), False, False),  # tile kernel, partial blocks
    ((3, 32, 40), 0, 1, (1, 16, 0), (8, 64, 40), True, False),  # C = 32, 2D
    ((64, 48), 0, 1, (64, 0), (256, 48), False, True),  # RHT
    ((64, 48), 0, 1, (64, 16), (256, 96), False, True),  # RHT, T offset in both dims
    ((2, 16, 32), 1, 1, (69000, 1000), (70000, 70000), False, False),  # row index >= 2^32
    ((2, 16, 32), 1, 1, (1000, 69000), (70000, 70000), False, False),  # col index >= 2^32
    # indices >= 2^35: the octet counter's high word, both parts
    ((16, 32), 0, 1, (299000, 298000), (300000, 300000), False, False),
    # 32-bit wrap of s + offset: rowwise between rows (k - 3), colwise inside a K block
    ((16, 32), 0, 1, (-3, 2**31 - 9), (16, 2**31), False, False),
    # the last dim's term wraps inside a block; row stride 2^31 + 1 (1 mod 8): first indices
    # at six positions of an octet; rowwise (x's L) and colwise (the T layout's K)
    ((6, 48), 0, 1, (3, -21), (16, 2**31 + 1), False, False),  # tile / scalar kernels
    ((6, 64), 0, 1, (3, -21), (16, 2**31 + 1), False, False),  # 16-bit row kernel, general
    ((48, 16), 0, 1, (-21, 3), (2**31 + 1, 16), False, False),  # colwise: K term wraps
    ((48, 16), 0, 1, (-21, 3), (2**31 + 1, 32), False, True),  # the same through the RHT
    # row 15's indices run over 2^35 - 41 ..: the low word of the octet counter wraps inside
    # a run of the row kernel (first index at position 7 of an octet) and of a tile kernel
    # block; colwise, T row 1 of the second case runs over 2^35 - 41 .. inside a K block
    ((2, 64), 0, 1, (14, 2**31 - 41), (16, 2**31), False, False),
    ((64, 2), 0, 1, (2**31 - 41, 14), (2**31, 16), False, False),
    # the fast row kernel's SR cursor (a lane's vectors 2048 elements apart): rank 3 (rows
    # over two dims), L = 16 (128 rows on), L = 2064 > 2048 (a column carry on most steps)
    ((4, 8, 32), 0, 1, (1, 2, 32), (8, 16, 96), False, False),
    ((300, 16), 0, 1, (7, 3), (1000, 32), False, False),
    ((8, 2064), 0, 1, (1, 16), (16, 4096), False, False),
    # RowHalfSrKernel (bf16, L % 16 == 0): where S[1:] == G[1:], the index is the local one
    # plus sum(offset * stride) (one Threefry call per vector on octet base / 8 + vector)
    # unless an s + offset wraps in 32 bits or the base is not a multiple of 8
    ((64, 64), 0, 1, (64, 0), (256, 64), False, False),  # linear
    ((16, 64), 0, 1, (3, 8), (32, 64), False, False),  # linear, a last-dim offset of 8
    ((16, 64), 0, 1, (3, 5), (32, 64), False, False),  # base 197: general
    ((16, 64), 0, 1, (-3, 0), (16, 64), False, False),  # s + offset wraps: general
    ((2, 16, 64), 1, 1, (16, 0), (64, 64), False, False),  # linear, batched keys
    ((1024,), 0, 0, (2048,), (4096,), False, False),  # rank 1 (rowwise only), linear
    ((1024,), 0, 0, (4,), (4096,), False, False),  # rank 1, base 4: general
    # linear octets 2^32 - 16 .. 2^32 + 15: the counter's low word wraps between vectors
    ((16, 16), 0, 1, (2**31 - 8, 0), (2**31, 16), False, False),
    # colwise octets along K misaligned with the blocks (K offset 2) and cut by the tensor's
    # edge: K = 40 ends two elements into an octet whose other six bytes are never stored
    ((40, 33), 0, 1, (2, 4), (64, 64), False, False),
    # K = 13 of 21 global rows: colwise octets straddle T rows (and C > 1, A > 1)
    ((2, 13, 3, 16), 0, 2, (1, 3, 0, 16), (3, 21, 3, 48), False, False),
    ((2, 32, 3, 16), 0, 2, (1, 16, 0, 16), (3, 64, 3, 48), True, False),  # 2D, tiles
]


SR_INDEX_CASES = [
    (case, parts) for case in SHARDED for parts in ("rows", "both")
    # rows: the rowwise-only kernels (1D); both: a colwise part (rank >= 2)
    if (parts == "both" and len(case[0]) - case[1] >= 2)
    or (parts == "rows" and not (case[5] or case[6]))
]


@pytest.mark.parametrize(
    "case,parts", SR_INDEX_CASES, ids=[f"{c[:5]}-{p}" for c, p in SR_INDEX_CASES]
)
def test_stochastic_rounding_index(case, parts):
    """SR bytes from ravel(s + offset, global_shape) rowwise and from the T-layout position
    ravel(T(s + offset), T(global_shape)) colwise (a shard of a larger tensor), batched keys,
    row kernels, tile and panel kernels: the raw op on the GPU == the raw op on the CPU."""
    shape, n_batch, fa, offset, global_shape, use_2d, use_rht = case
    x = spread_random(shape, jnp.bfloat16, seed=21)
    batch = shape[:n_batch]
    amax = np.full(batch + (1,), np.float32(np.max(np.abs(x.astype(np.float32)))))
    col_amax = amax * np.float32(1.5)
    key = np.arange(2 * int(np.prod(batch)), dtype=np.uint32).reshape(batch + (2,)) + 7
    args = [x, amax, col_amax, key, np.asarray(offset, np.int32)]
    flags = dict(n_batch=n_batch, fa=fa, rowwise=True, colwise=parts == "both", use_2d=use_2d,
                 use_rht=use_rht, sr=True)
    got, want = _raw_op_gpu_and_cpu(args, global_shape, **flags)
    for name, g, w in zip(("row", "row_scale", "col", "col_scale"), got, want):
        assert_same_bytes(g, w, f"{shape} offset={offset} {parts}: {name}")


@pytest.mark.parametrize("x_name", ["bf16", "f16"])
@pytest.mark.parametrize("parts", ["both", "col"])
@pytest.mark.parametrize("amaxes", ["equal", "different"])
def test_2d_panels(x_name, parts, amaxes):
    """2D NVFP4 of 16-bit input without SR on aligned shapes runs PanelKernel's 2D path: one
    encode per tile row, the colwise codes the transposed rowwise ones where both parts share
    the tensor scale, a second encode at the colwise scale where the caller passed another
    colwise amax (the raw op). It takes grids of at least a CTA per two SMs (PanelsApply): here
    81 CTAs per example (K = 1040: 65 panels, a partial last group of 8; W = 2064: 258 vectors,
    a partial vector group of 32) and enough examples, each with its own amax. Tiles with a
    NaN (the NaN-free tile key, the exact encoder), an inf, all zeros and subnormals."""
    k, w = 1040, 2064
    batch = -(-getattr(CUDA, "core_count", 132) // 81)  # an H100 / H200 where JAX does not say
    x = spread_random((max(2, batch), k, w), X_DTYPES[x_name], seed=41)
    x[0, 16:32, 32:48] = 0
    x[0, 40, 70] = np.nan
    x[1, 100, 300] = np.inf
    x[1, k - 16 :, w - 16 :] *= np.float32(2.0**-20)
    amax = np.array([[np.nanmax(np.abs(e.astype(np.float32)))] for e in x], np.float32)
    col_amax = amax * np.float32(1.5) if amaxes == "different" else amax
    key = np.zeros((len(x), 2), np.uint32)
    args = [x, amax, col_amax, key, np.zeros(2, np.int32)]
    flags = dict(n_batch=1, fa=1, rowwise=parts == "both", colwise=True, use_2d=True,
                 use_rht=False, sr=False)
    got, want = _raw_op_gpu_and_cpu(args, (k, w), **flags)
    for name, g, w in zip(("row", "row_scale", "col", "col_scale"), got, want):
        assert_same_bytes(g, w, f"2D {x_name} {parts} {amaxes}: {name}")


_GRAPH_CODE = textwrap.dedent(
    """
    import hashlib
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    import eqx_quant as eqq

    def byte_views(t):
        out = []
        for part in (t.rowwise, t.colwise):
            if part is not None:
                out.append(lax.bitcast_convert_type(part.data, jnp.uint4).astype(jnp.uint8))
                out.append(lax.bitcast_convert_type(part.scale_inv, jnp.uint8))
                out.append(lax.bitcast_convert_type(part.amax, jnp.uint32))
        return out

    def run():
        x = jnp.asarray(np.random.default_rng(1).standard_normal((512, 384)) * 3, jnp.bfloat16)
        key = jax.random.key(3)
        out = []
        quantizers = (
            eqq.NVFP4Quantizer(q_layout=eqq.QuantizeLayout.ROWWISE),
            eqq.NVFP4Quantizer(use_rht=True),
            eqq.NVFP4Quantizer(use_2d=True, stochastic_rounding=True),
        )
        for q in quantizers:
            k = key if q.stochastic_rounding else None
            f = jax.jit(lambda x: byte_views(eqq.quantize(jnp.sin(x) * 2, q, key=k, impl="ffi")))
            g = jax.jit(lambda x: byte_views(eqq.quantize(x[:, :-16] + 1, q, key=k, impl="ffi")))
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
    """Under XLA command buffers with every op captured (--xla_gpu_graph_min_graph_size=1; the
    handlers are kCmdBufferCompatible, the amax kernel uses programmatic dependent launch) the
    bytes equal those of this process."""
    assert_graph_replay_matches(_GRAPH_CODE, CUDA)
