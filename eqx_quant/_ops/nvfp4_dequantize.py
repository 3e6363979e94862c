"""`eqx_quant_nvfp4_dequantize(codes, scales, decode_scales) -> out`: a dense NVFP4 part's
values in its stored layout (each E2M1 code times its E4M3 block scale times its example's
global decode scale `fl(amax / 2688)`) as bfloat16 or float32 (docs/block_formats.md): with
decode scale 1, the exact operand a bfloat16 GEMM multiplies on Hopper, which has no
block-scaled MMA. Parts with a random Hadamard transform stay on the pure-JAX path.

`codes` `(A, L)` with the blocks of 16 along L, `scales` `(A, ceil(L/16))` bytes,
`decode_scales` `(E,)`, one per example of `A / E` rows. Declared once, with the pure-JAX
reference (`reference.blocks_nd.nvfp4_dequantize_with`), a CPU kernel
(`csrc/nvfp4/dequantize_cpu.cc`) and a CUDA kernel (`csrc/nvfp4/dequantize_cuda.cu`),
bit-identical (`tests/kernels/test_dequantize_kernels.py`,
`tests/cuda/test_cuda_nvfp4_dequantize.py`).
Batching folds the examples into the rows; a partition keeps L whole and
splits the rows where the decode scales split with them.
"""

import dataclasses

import jax.numpy as jnp
from jax.core import ShapedArray
from jax.sharding import PartitionSpec

from ..reference import blocks_nd, nvfp4
from . import _sharding
from ._primitive import Op, OpSpec, fold_batch_into_rows, unfold_rows

NVFP4_DEQUANTIZE_DTYPES = ("bfloat16", "float32")  # the dtypes the kernel writes


@dataclasses.dataclass(frozen=True)
class Nvfp4DequantizeParams:
    out_dtype: str
    impl: str

    def ffi_attrs(self) -> dict:
        return {}


def _abstract_eval(params, codes, scales, decode_scales):
    del scales, decode_scales
    return (ShapedArray(codes.shape, jnp.dtype(params.out_dtype)),)


def _reference(params, codes, scales, decode_scales):
    rows = codes.shape[0]
    per_row = jnp.repeat(decode_scales, rows // max(decode_scales.shape[0], 1))[:, None]
    return (blocks_nd.nvfp4_dequantize_with(nvfp4.e2m1_codes(codes), scales, per_row,
                                            params.out_dtype, None),)


def _sharding_rule(params, mesh, value_types, result_types):
    del params, mesh, value_types, result_types
    return "a l, a s, e -> a l"


def _partition(params, mesh, arg_infos, result_infos):
    del result_infos
    codes, _, decode = arg_infos
    spec = _sharding.keep_divisible(mesh, codes.shape, _sharding.padded_spec(codes.sharding, 2))
    rows = spec[0]
    examples = decode.shape[0]
    if rows is not None and examples > 1 and examples % _sharding.shard_count(mesh, rows):
        rows = None
    decode_spec = PartitionSpec(rows if examples > 1 else None)

    def local_fn(bind_inner, codes, scales, decode_scales):
        return bind_inner(codes, scales, decode_scales, params=params)

    row_spec = PartitionSpec(rows, None)
    return local_fn, (row_spec,), (row_spec, row_spec, decode_spec)


nvfp4_dequantize_op = Op(
    OpSpec(
        name="nvfp4_dequantize",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=fold_batch_into_rows,
        batch_outputs=unfold_rows,
        sharding_rule=_sharding_rule,
        partition=_partition,
    )
)
