"""`eqx_quant_fp8_block_gemm(a, a_scale, b, b_scale) -> out`: the FP8 block-scaled GEMM
(docs/block_formats.md, "FP8 block scaling"): `out (M, N) = A (M, K) @ B (N, K)^T`, float32
sums rounded once to `out_dtype` (float32, or bfloat16 where N is a multiple of 8),
both E4M3, K-contiguous, with one float32 `scale_inv` per 1x128 block of A along K
(`a_scale`: `(ceil(K/128), M)`, M-contiguous, CUTLASS's layout) and one per 128x128 tile of B
(`b_tiles`; `b_scale`: `(ceil(K/128), ceil(N/128))`) or per 1x128 block of B's rows
(`b_scale`: `(ceil(K/128), N)`).

On CUDA: CUTLASS's Hopper blockwise-scaled FP8 GEMM (`csrc/gemm/fp8_block_gemm_*`), which
applies the scales to the float32 partial sums of each 128-long K block (Hopper's FP8 MMA
sums within a block with fewer bits than float32: `tests/cuda/test_cuda_fp8_block_gemm.py`).
Elsewhere (and as the reference): the dequantized float32 operands multiplied at HIGHEST
precision; both are within the float32 accumulation bound of the float64 product.

Batching: a vmapped A alone (the examples of one weight) folds into the rows of one GEMM; a
vmapped B (one weight per example) is a batch of GEMMs the kernel does not have, and runs as
the reference (`params.batched`), leading dims first.

Sharding: rows of A and of B split the output; a contraction dim split into whole 128-blocks
on both operands is multiplied locally and summed (`psum`); anything else is gathered.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from . import _sharding
from ._primitive import Op, OpSpec, batch_first, batch_size

BLOCK = 128


@dataclasses.dataclass(frozen=True)
class Fp8BlockGemmParams:
    b_tiles: bool
    impl: str
    batched: bool = False  # leading dims on every operand: the reference, example by example
    out_dtype: str = "float32"  # or "bfloat16" (N a multiple of 8 on CUDA: 16-byte TMA rows)

    def ffi_attrs(self) -> dict:
        return dict(b_tiles=bool(self.b_tiles))


def _abstract_eval(params, a, a_scale, b, b_scale):
    del a_scale, b_scale
    return (ShapedArray(a.shape[:-1] + (b.shape[-2],), jnp.dtype(params.out_dtype)),)


def _expand(scale_kb_first, rows: int, k: int, rows_per_scale: int):
    """Each element's scale, `(..., rows, k)`, from a `(..., ceil(K/128), rows /
    rows_per_scale)` scale matrix."""
    s = jnp.swapaxes(scale_kb_first, -1, -2)
    s = jnp.repeat(jnp.repeat(s, rows_per_scale, axis=-2), BLOCK, axis=-1)
    return s[..., :rows, :k]


def _reference(params, a, a_scale, b, b_scale):
    m, k = a.shape[-2:]
    n = b.shape[-2]
    da = a.astype(jnp.float32) * _expand(a_scale, m, k, 1)
    db = b.astype(jnp.float32) * _expand(b_scale, n, k, BLOCK if params.b_tiles else 1)
    lead = tuple(range(a.ndim - 2))
    out = jax.lax.dot_general(da, db, (((a.ndim - 1,), (b.ndim - 1,)), (lead, lead)),
                              precision=jax.lax.Precision.HIGHEST,
                              preferred_element_type=jnp.float32)
    return (out.astype(params.out_dtype),)


def _folds(params, dims) -> bool:
    """One weight for every example: the examples' rows are rows of one GEMM."""
    return not params.batched and dims[2] is None and dims[3] is None


def _batch(params, args, dims):
    size, moved = batch_first(args, dims)
    if _folds(params, dims):
        a, a_scale, b, b_scale = moved[0], moved[1], args[2], args[3]
        _, m, k = a.shape
        a_scale = jnp.moveaxis(a_scale, 0, 1).reshape(a_scale.shape[1], size * m)
        return params, (a.reshape(size * m, k), a_scale, b, b_scale), (0,)
    return dataclasses.replace(params, impl="reference", batched=True), tuple(moved), (0,)


def _batch_outputs(params, args, dims, outs):
    if not _folds(params, dims):
        return outs
    a, da = args[0], dims[0]
    a_shape = a.shape if da is None else a.shape[:da] + a.shape[da + 1:]
    size = batch_size(args, dims)
    (y,) = outs
    return (y.reshape(size, a_shape[0], y.shape[-1]),)


def _sharding_rule(params, mesh, value_types, result_types):
    del params, mesh, result_types
    lead = " ".join(f"l{i}" for i in range(len(value_types[0].shape) - 2))
    return (f"{lead} m k, {lead} kb m, {lead} n k, {lead} kb nb -> {lead} m n"
            if lead else "m k, kb m, n k, kb nb -> m n")


def _partition(params, mesh, arg_infos, result_infos):
    del result_infos
    a_info, _, b_info, _ = arg_infos
    if params.batched:
        specs = tuple(PartitionSpec(*([None] * len(i.shape))) for i in arg_infos)
        out = PartitionSpec(*([None] * len(a_info.shape)))

        def local_batched(bind_inner, *args):
            return bind_inner(*args, params=params)

        return local_batched, (out,), specs

    def spec_of(info, blocked):
        spec = _sharding.padded_spec(info.sharding, 2)
        spec = _sharding.keep_divisible(mesh, info.shape, spec)
        return _sharding.keep_blocks_whole(mesh, info.shape, spec, blocked)

    sa = spec_of(a_info, {1: BLOCK})
    sb = spec_of(b_info, {0: BLOCK, 1: BLOCK} if params.b_tiles else {1: BLOCK})
    take = _sharding.axes_taken_once()

    k = take(sa[1]) if sa[1] is not None and sa[1] == sb[1] else None
    m = take(sa[0])
    n = take(sb[0])
    summed = _sharding.axes_of(k)
    arg_specs = (PartitionSpec(m, k), PartitionSpec(k, m), PartitionSpec(n, k),
                 PartitionSpec(k, n))

    # Partial products over a split K are summed in float32, then rounded once.
    inner = dataclasses.replace(params, out_dtype="float32") if summed else params

    def local_fn(bind_inner, a, a_scale, b, b_scale):
        (y,) = bind_inner(a, a_scale, b, b_scale, params=inner)
        if summed:
            y = jax.lax.psum(y, summed).astype(params.out_dtype)
        return (y,)

    return local_fn, (PartitionSpec(m, n),), arg_specs


fp8_block_gemm_op = Op(
    OpSpec(
        name="fp8_block_gemm",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=_batch,
        batch_outputs=_batch_outputs,
        sharding_rule=_sharding_rule,
        partition=_partition,
        kernel_platforms=("cuda",),
    )
)


def gemm_scales(part) -> jax.Array:
    """A part's compact `scale_inv` as this op takes it: `(ceil(K/128), rows or row tiles)`,
    the contraction's blocks first (the transpose of the compact matrix)."""
    return part.scale_inv.T
