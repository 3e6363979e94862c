"""Public grouped (MoE) quantization: grouped_quantize, grouped_quantize_dbias, grouped_dbias.

Contract in docs/grouped.md. Each group's rows are quantized exactly as the dense `quantize`
would quantize them alone; group offsets are computed on the device; one op per call.
"""

import dataclasses
import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from jaxtyping import Array, Int, PRNGKeyArray, Shaped, jaxtyped

from .._core import (
    HighPrecision,
    explicit_sharding,
    validated_by,
    with_auto_axes_to,
)
from .._formats import format_of
from .._ops import (
    GroupedParams,
    GroupSizesCheckParams,
    group_sizes_check_op,
    grouped_dbias_op,
)
from .._quantizer import AbstractQuantizer
from .._tensor import GroupedLayout, GroupedScaledTensor, GroupedScaledTensor1x, rows_from_stored
from ..reference import grouped
from ._checks import Impl, check_group_sizes, check_grouped, check_token_matrix, key_words_of


@dataclasses.dataclass(frozen=True)
class _Config:
    quantizer_static: AbstractQuantizer
    flatten_axis: int
    impl: str
    with_dbias: bool
    check: bool
    x_shape: tuple[int, ...]
    x_dtype: str
    x_sharding: jax.sharding.NamedSharding | None  # in x's type (Explicit axes), else None
    fn: str  # the public function, for messages
    one_group_per_unit: bool  # group_sizes=None: group g is unit g (a weight-like [G, K, N])

    def layout(self, mode, data_layout: str, is_colwise: bool) -> GroupedLayout:
        return GroupedLayout(
            mode, self.x_shape, self.flatten_axis, self.x_dtype, data_layout, is_colwise
        )


def check_sizes_now(fn: str, group_sizes, total: int, check: bool, operand: str) -> None:
    """Outside `jit` the sizes are concrete: a bad vector is a plain ValueError here, which
    says what the sizes were (under `jit` the run-time check raises instead)."""
    if not check or group_sizes is None or isinstance(group_sizes, jax.core.Tracer):
        return
    sizes = np.asarray(group_sizes).astype(np.int64)
    if np.any(sizes < 0) or int(sizes.sum()) != total:
        raise ValueError(
            f"{fn}: group_sizes must be non-negative and sum to {operand}.shape[0] = {total}, got "
            f"{sizes.tolist()} (sum {int(sizes.sum())}). Rows past the sum would be zero in "
            "the output; pass check=False to allow that."
        )


def _token_matrix_name(fn: str) -> str:
    """The name of the public function's token-matrix argument, for messages."""
    return "dx" if fn == "grouped_quantize_dbias" else "x"


def _checked_sizes(group_sizes, total: int, check: bool, fn: str, operand: str, impl: str):
    """`group_sizes`, with the run-time check attached (on the small sizes array, so no
    tensor-sized copy is needed to keep the check alive)."""
    if not check:
        return group_sizes
    params = GroupSizesCheckParams(total=total, fn=fn, operand=operand, impl=impl)
    (group_sizes,) = group_sizes_check_op.bind(group_sizes, params=params)
    return group_sizes


@functools.partial(jax.jit, static_argnums=0)
def _forward(config: _Config, x, group_sizes, quantizer_arrays, key_words):
    quantizer = eqx.combine(quantizer_arrays, config.quantizer_static)
    fa, shape = config.flatten_axis, config.x_shape
    r, n = math.prod(shape[:fa]), math.prod(shape[fa:])
    x2d = x.reshape(r, n)
    group_sizes = _checked_sizes(group_sizes, shape[0], config.check, config.fn,
                                 _token_matrix_name(config.fn), config.impl)
    rpu = math.prod(shape[1:fa])
    layout = quantizer.q_layout
    mode = quantizer.scaling_mode
    rows, cols = format_of(mode).grouped_quantize(
        x2d, group_sizes, quantizer, rows_per_unit=rpu, impl=config.impl, key_words=key_words,
        one_group_per_unit=config.one_group_per_unit,
    )

    def part(arrays):
        data = arrays.data.reshape(shape) if arrays.data_layout == "N" else arrays.data
        return GroupedScaledTensor1x(
            data=data,
            scale_inv=arrays.scale_inv,
            amax=arrays.amax,
            group_sizes=group_sizes,
            scaling_mode=mode,
            original_shape=shape,
            flatten_axis=fa,
            dq_dtype=config.x_dtype,
            data_layout=arrays.data_layout,
            is_colwise=arrays.is_colwise,
        )

    tensor = GroupedScaledTensor(
        rowwise=part(rows) if layout.has_rowwise else None,
        colwise=part(cols) if layout.has_colwise else None,
    )
    dbias = None
    if config.with_dbias:
        dbias = _dbias(x2d, group_sizes, rpu, config.impl, shape[fa:], config.one_group_per_unit)
    return tensor, dbias


def _dbias(x2d, group_sizes, rpu: int, impl: str, tail: tuple[int, ...],
           one_group_per_unit: bool = False):
    params = GroupedParams(kind="dbias", rows_per_unit=rpu, impl=impl,
                           one_group_per_unit=one_group_per_unit)
    (db,) = grouped_dbias_op.bind(x2d, group_sizes, params=params)  # in x's dtype
    return db.reshape((group_sizes.shape[0],) + tail)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _grouped_ste(config, x, group_sizes, quantizer_arrays, key_words):
    return _forward(config, x, group_sizes, quantizer_arrays, key_words)


def _grouped_ste_fwd(config, x, group_sizes, quantizer_arrays, key_words):
    out = _forward(config, x, group_sizes, quantizer_arrays, key_words)
    return out, (group_sizes, quantizer_arrays)


def _grouped_ste_bwd(config, residuals, cotangents):
    group_sizes, quantizer_arrays = residuals
    ct_tensor, ct_dbias = cotangents

    def cotangent_of_x(ct_tensor, ct_dbias, group_sizes):
        dx = jnp.zeros(config.x_shape, jnp.float32)
        for part in (ct_tensor.rowwise, ct_tensor.colwise):
            if part is not None:
                mode = config.quantizer_static.scaling_mode
                layout = config.layout(mode, part.data_layout, part.is_colwise)
                dx = dx + rows_from_stored(part.data, group_sizes, layout)
        if ct_dbias is not None:
            fa = config.flatten_axis
            dx = dx + _dbias_cotangent(ct_dbias, group_sizes, config.x_shape, fa)
        return dx.astype(config.x_dtype)

    # Under Explicit mesh axes the row gathers run as under Auto axes, typed like x.
    dx = with_auto_axes_to(cotangent_of_x, config.x_sharding)(ct_tensor, ct_dbias, group_sizes)
    zeros = jax.tree.map(jnp.zeros_like, quantizer_arrays)
    return dx, _no_cotangent(group_sizes), zeros, None


def _no_cotangent(group_sizes):
    return np.zeros(group_sizes.shape, jax.dtypes.float0)


def _dbias_cotangent(ct_dbias, group_sizes, x_shape, fa: int):
    """The cotangent of x for a dbias cotangent: each row gets its group's (0 past the sum)."""
    rows, rpu = math.prod(x_shape[:fa]), math.prod(x_shape[1:fa])
    starts, counts = grouped.group_bounds(group_sizes, rpu, rows)
    gid = grouped.row_groups(starts, counts, rows)
    groups = group_sizes.shape[0]
    per_group = ct_dbias.astype(jnp.float32).reshape(groups, -1)
    per_row = per_group[jnp.minimum(gid, groups - 1)]
    return jnp.where((gid < groups)[:, None], per_row, 0.0).reshape(x_shape)


_grouped_ste.defvjp(_grouped_ste_fwd, _grouped_ste_bwd)


def _run(fn, x, group_sizes, quantizer, flatten_axis, key, check, impl, with_dbias):
    fa = check_grouped(fn, x, group_sizes, quantizer, flatten_axis, impl, key)
    check_sizes_now(fn, group_sizes, x.shape[0], check, _token_matrix_name(fn))
    one_group_per_unit = group_sizes is None
    if group_sizes is None:
        group_sizes = jnp.ones((x.shape[0],), jnp.int32)
    arrays, static = eqx.partition(quantizer, eqx.is_array)
    config = _Config(
        static, fa, impl, with_dbias, bool(check), x.shape, x.dtype.name, explicit_sharding(x), fn,
        one_group_per_unit,
    )
    key_words = None if key is None else key_words_of(fn, key)
    return _grouped_ste(config, x, group_sizes, arrays, key_words)


def _check_gq(x, group_sizes, quantizer, flatten_axis, key, check, impl):
    check_grouped("grouped_quantize", x, group_sizes, quantizer, flatten_axis, impl, key)


def _check_gqd(dx, group_sizes, quantizer, flatten_axis, key, check, impl):
    check_grouped("grouped_quantize_dbias", dx, group_sizes, quantizer, flatten_axis, impl, key)


@validated_by(_check_gq)
@jaxtyped(typechecker=beartype)
def grouped_quantize(
    x: HighPrecision[Array, "..."],
    group_sizes: Int[Array, " G"] | None,
    quantizer: AbstractQuantizer,
    flatten_axis: int = -1,
    *,
    key: PRNGKeyArray | None = None,
    check: bool = True,
    impl: Impl = "auto",
) -> GroupedScaledTensor:
    """Quantize a token matrix whose rows are split into ragged groups (docs/grouped.md).

    **Arguments:**

    - `x`: `[M, ...]` float32/float16/bfloat16; groups are contiguous ranges of axis 0.
    - `group_sizes`: int32 `(G,)`, entries of axis 0 per group (on the device; empty groups
      allowed), or None for a weight-like `[G, K, N]` (one group per leading index).
    - `quantizer`: `CurrentScaleQuantizer`, `GroupedDelayedScaleQuantizer`,
      `BlockScaleQuantizer` (MXFP8), `NVFP4Quantizer` (without RHT) or
      `Float8BlockQuantizer` (1x128 or 128x128 blocks from each group's start; it runs as
      XLA for now, so `impl="ffi"` is refused).
    - `flatten_axis`: the 2-D view `(prod S[:fa], prod S[fa:])`; `fa >= 1`. Default -1.
    - `key`: for NVFP4 stochastic rounding; group g uses `jax.random.fold_in(key, g)`.
    - `check`: raise at run time if `group_sizes` has a negative entry or
      does not sum to `x.shape[0]` (default True). Either way nothing is read or written out
      of bounds, and rows past the sum are zero in the output.
    - `impl`: `"auto"`, `"ffi"` or `"reference"`, as in `quantize`.

    **Returns:** a `GroupedScaledTensor`; each group's rows are bit-identical to the dense
    `quantize` of those rows alone (block formats: blocks never straddle groups).
    """
    tensor, _ = _run("grouped_quantize", x, group_sizes, quantizer, flatten_axis, key, check,
                     impl, False)
    return tensor


@validated_by(_check_gqd)
@jaxtyped(typechecker=beartype)
def grouped_quantize_dbias(
    dx: HighPrecision[Array, "..."],
    group_sizes: Int[Array, " G"] | None,
    quantizer: AbstractQuantizer,
    flatten_axis: int = -1,
    *,
    key: PRNGKeyArray | None = None,
    check: bool = True,
    impl: Impl = "auto",
) -> tuple[GroupedScaledTensor, Shaped[Array, "G ..."]]:
    """`grouped_quantize` plus each group's bias gradient `[G, *dx.shape[fa:]]`: the float32
    canonical tree sum of the group's rows, cast to dx's dtype (equal to the dense
    `quantize_dbias` of the group's rows)."""
    return _run("grouped_quantize_dbias", dx, group_sizes, quantizer, flatten_axis, key, check,
                impl, True)


def _check_gd(grad, group_sizes, check, impl):
    fn = "grouped_dbias"
    check_token_matrix(fn, "grad", grad)
    if grad.dtype.name not in ("float32", "float16", "bfloat16"):
        raise TypeError(f"{fn}: grad must be float32, float16 or bfloat16, got {grad.dtype}.")
    if impl not in ("auto", "ffi", "reference"):
        raise ValueError(f"{fn}: impl must be 'auto', 'ffi' or 'reference', got {impl!r}.")
    check_group_sizes(fn, grad, group_sizes)
    check_sizes_now(fn, group_sizes, grad.shape[0], check, "grad")


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
@functools.partial(jax.jit, static_argnums=(2, 3))
def _grouped_dbias(grad, group_sizes, check: bool, impl: str):
    m = grad.shape[0]
    n = math.prod(grad.shape[1:])
    group_sizes = _checked_sizes(group_sizes, m, check, "grouped_dbias", "grad", impl)
    return _dbias(grad.reshape(m, n), group_sizes, 1, impl, grad.shape[1:])


def _grouped_dbias_fwd(grad, group_sizes, check, impl):
    # An empty (M, 0) array carries grad's row count and dtype (residuals must be arrays).
    like = jnp.zeros((grad.shape[0], 0), grad.dtype)
    return _grouped_dbias(grad, group_sizes, check, impl), (group_sizes, like)


def _grouped_dbias_bwd(check, impl, residuals, ct):
    del check, impl
    group_sizes, like = residuals
    shape = like.shape[:1] + ct.shape[1:]
    dx = _dbias_cotangent(ct, group_sizes, shape, 1).astype(like.dtype)
    return dx, _no_cotangent(group_sizes)


_grouped_dbias.defvjp(_grouped_dbias_fwd, _grouped_dbias_bwd)


@validated_by(_check_gd)
@jaxtyped(typechecker=beartype)
def grouped_dbias(
    grad: HighPrecision[Array, "M ..."],
    group_sizes: Int[Array, " G"],
    *,
    check: bool = True,
    impl: Impl = "auto",
) -> Shaped[Array, "G ..."]:
    """Per-group bias gradient `[G, *grad.shape[1:]]`: the float32 canonical tree sum of each
    group's rows of axis 0 (`+0` for an empty group), cast to grad's dtype. Bit-identical to
    `quantize_dbias(grad[rows_g], q, flatten_axis=1)[1]` for each group. `check` as in
    `grouped_quantize`."""
    return _grouped_dbias(grad, group_sizes, bool(check), impl)
