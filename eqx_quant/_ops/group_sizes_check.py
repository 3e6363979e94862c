"""The run-time check of a grouped op's group sizes under `jit` (docs/grouped.md, "Checks").

`eqx_quant_group_sizes_check(group_sizes) -> group_sizes`: the sizes unchanged when they are
non-negative and sum to `total`, else the call fails. The CPU and CUDA kernels fail it with
a message that names the sizes and their sum (`csrc/grouped/sizes_check.h`), which XLA puts
on the first line of the error `jit` raises; the CUDA one copies the few bytes of sizes to
the host and waits for them, as the host callback of `eqx.error_if` would. Elsewhere
(`impl="reference"`, other platforms) the check is `eqx.error_if`, whose message XLA prints
under the callback's traceback.

The sizes are small and replicated: the partition keeps them whole on every device.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec

from .._core import checked
from ._primitive import Op, OpSpec


@dataclasses.dataclass(frozen=True)
class GroupSizesCheckParams:
    """`total`: the rows the sizes must sum to; `fn` / `operand`: the public function and
    the name of its token matrix, for the message."""

    total: int
    fn: str
    operand: str
    impl: str

    def ffi_attrs(self) -> dict:
        return dict(total=np.int64(self.total), fn=self.fn, operand=self.operand)

    @property
    def message(self) -> str:
        return (
            f"eqx_quant.{self.fn}: group_sizes must be non-negative and sum to "
            f"{self.operand}.shape[0] = {self.total}. Rows past the sum would be zero in the "
            "output; pass check=False to allow that."
        )


def _abstract_eval(params, group_sizes):
    del params
    return (jax.core.ShapedArray(group_sizes.shape, group_sizes.dtype),)


def _reference(params, group_sizes):
    total = params.total
    # A saturating sum (min(a + b, total + 1) is associative on [0, total + 1]): sizes whose
    # int32 sum wraps around to `total` are still caught.
    capped = jnp.clip(group_sizes, 0, total + 1)
    summed = lax.associative_scan(lambda a, b: jnp.minimum(a + b, total + 1), capped, axis=-1)
    bad = jnp.any(summed[..., -1] != total) | jnp.any(group_sizes < 0)
    return (checked(group_sizes, bad, params.message),)


def _batch(params, args, dims):
    (sizes,), (dim,) = args, dims
    return params, (jnp.moveaxis(sizes, dim, 0),), (0,)


def _sharding_rule(params, mesh, value_types, result_types):
    del params, mesh, result_types
    dims = " ".join(f"d{i}" for i in range(len(value_types[0].shape)))
    return f"{dims} -> {dims}"


def _partition(params, mesh, arg_infos, result_infos):
    del mesh, result_infos
    whole = PartitionSpec(*([None] * len(arg_infos[0].shape)))

    def local_fn(bind_inner, sizes):
        return bind_inner(sizes, params=params)

    return local_fn, (whole,), (whole,)


group_sizes_check_op = Op(
    OpSpec(
        name="group_sizes_check",
        abstract_eval=_abstract_eval,
        inner_abstract_eval=_abstract_eval,
        reference=_reference,
        batch=_batch,
        sharding_rule=_sharding_rule,
        partition=_partition,
        kernel_platforms=("cpu", "cuda"),
    )
)
