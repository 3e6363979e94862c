"""`eqx_quant_fp8_block_gemm(a, a_scale, b, b_scale) -> out`: the FP8 block-scaled GEMM
(docs/block_formats.md, "FP8 block scaling"): `out (M, N) float32 = A (M, K) @ B (N, K)^T`,
both E4M3, K-contiguous, with one float32 `scale_inv` per 1x128 block of A along K
(`a_scale`: `(ceil(K/128), M)`, M-contiguous, CUTLASS's layout) and one per 128x128 tile of B
(`b_tiles`; `b_scale`: `(ceil(K/128), ceil(N/128))`) or per 1x128 block of B's rows
(`b_scale`: `(ceil(K/128), N)`).

On CUDA: CUTLASS's Hopper blockwise-scaled FP8 GEMM (`csrc/gemm/fp8_block_gemm_*`), which
applies the scales to the float32 partial sums of each 128-long K block. Elsewhere (and as
the reference): the dequantized float32 operands multiplied at HIGHEST precision; both are
within the float32 accumulation bound of the float64 product. Rows of A may be sharded (each
device multiplies its rows); other shardings are gathered.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from . import _sharding
from ._primitive import Op, OpSpec

BLOCK = 128


@dataclasses.dataclass(frozen=True)
class Fp8BlockGemmParams:
    b_tiles: bool
    impl: str

    def ffi_attrs(self) -> dict:
        return dict(b_tiles=bool(self.b_tiles))


def _abstract_eval(params, a, a_scale, b, b_scale):
    del params, a_scale, b_scale
    return (ShapedArray((a.shape[0], b.shape[0]), jnp.float32),)


def _expand(scale_kb_first, rows: int, k: int, rows_per_scale: int):
    """Each element's scale, `(rows, k)`, from a `(ceil(K/128), rows / rows_per_scale)`
    scale matrix."""
    s = scale_kb_first.T
    s = jnp.repeat(jnp.repeat(s, rows_per_scale, axis=0), BLOCK, axis=1)
    return s[:rows, :k]


def _reference(params, a, a_scale, b, b_scale):
    m, k = a.shape
    n = b.shape[0]
    da = a.astype(jnp.float32) * _expand(a_scale, m, k, 1)
    db = b.astype(jnp.float32) * _expand(b_scale, n, k, BLOCK if params.b_tiles else 1)
    out = jax.lax.dot_general(da, db, (((1,), (1,)), ((), ())),
                              precision=jax.lax.Precision.HIGHEST,
                              preferred_element_type=jnp.float32)
    return (out,)


def _batch(params, args, dims):
    raise NotImplementedError(
        "eqx_quant_fp8_block_gemm has no batching rule: eqx_quant.gemm folds batch dims into "
        "the GEMM rows before it."
    )


def _sharding_rule(params, mesh, value_types, result_types):
    del params, mesh, value_types, result_types
    return "m u0, u1 m, u2 u3, u4 u5 -> m u6"


def _partition(params, mesh, arg_infos, result_infos):
    del result_infos
    a_info = arg_infos[0]
    spec = _sharding.keep_divisible(
        mesh, a_info.shape, _sharding.padded_spec(a_info.sharding, 2)
    )
    rows = spec[0]
    arg_specs = (PartitionSpec(rows, None), PartitionSpec(None, rows),
                 PartitionSpec(None, None), PartitionSpec(None, None))

    def local_fn(bind_inner, a, a_scale, b, b_scale):
        return bind_inner(a, a_scale, b, b_scale, params=params)

    return local_fn, (PartitionSpec(rows, None),), arg_specs


def _unsharded(params, bind_inner, *args):
    return bind_inner(*args, params=params)


fp8_block_gemm_op = Op(
    OpSpec(
        name="fp8_block_gemm",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
        unsharded=_unsharded,
        kernel_platforms=("cuda",),
    )
)


def gemm_scales(part) -> jax.Array:
    """A part's compact `scale_inv` as this op takes it: `(ceil(K/128), rows or row tiles)`,
    the contraction's blocks first (the transpose of the compact matrix)."""
    return part.scale_inv.T

