"""Grouped quantized tensors: `GroupedScaledTensor1x` (one layout) and `GroupedScaledTensor`.

Layouts in docs/grouped.md. Gradients follow the dense convention (`_scaled_tensor.py`): the
cotangent of `data` is in dequantized units and in the stored layout, so `jax.grad` through
`grouped_quantize(x, ...).dequantize()` is the identity on the rows that belong to a group.
"""

import functools
import math
from typing import Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from jaxtyping import Array, Float, Int, Shaped, jaxtyped

from .._core import ScalingMode
from .._formats import GroupedRows, format_of
from ..reference import grouped
from ._scaled_tensor import (
    AbstractLayoutPair,
    AbstractScaledTensor,
    ScaledTensor1x,
    float_dtype_name,
)


class GroupedLayout(NamedTuple):
    """Static description of one grouped part (hashable; keys the jitted dequantize)."""

    scaling_mode: ScalingMode
    original_shape: tuple[int, ...]
    flatten_axis: int
    dq_dtype: str
    data_layout: str
    is_colwise: bool

    @property
    def rows(self) -> int:
        return math.prod(self.original_shape[: self.flatten_axis])

    @property
    def cols(self) -> int:
        return math.prod(self.original_shape[self.flatten_axis :])

    @property
    def rows_per_unit(self) -> int:
        return math.prod(self.original_shape[1 : self.flatten_axis])


class RowLocation(NamedTuple):
    starts: Array
    counts: Array
    gid: Array  # group of every row (G past the last group)
    local: Array  # row index inside its group


def locate_rows(group_sizes, layout: GroupedLayout) -> RowLocation:
    starts, counts = grouped.group_bounds(group_sizes, layout.rows_per_unit, layout.rows)
    gid = grouped.row_groups(starts, counts, layout.rows)
    g = jnp.minimum(gid, group_sizes.shape[0] - 1)
    local = jnp.arange(layout.rows, dtype=jnp.int32) - starts[g]
    return RowLocation(starts, counts, gid, local)


def _flat_index(w: RowLocation, cols: int):
    """Position in the flat T buffer of every (row, col) of the 2-D view (rows of a group)."""
    g = jnp.minimum(w.gid, w.counts.shape[0] - 1)
    n = jnp.arange(cols, dtype=jnp.int32)[None, :]
    return w.starts[g][:, None] * cols + n * w.counts[g][:, None] + w.local[:, None]


def rows_view(data, w: RowLocation, layout: GroupedLayout):
    """The stored data as the (R, N) view in x's row order."""
    if layout.data_layout == "N":
        return data.reshape(layout.rows, layout.cols)
    flat = data.reshape(-1)
    return flat[jnp.clip(_flat_index(w, layout.cols), 0, max(flat.shape[0] - 1, 0))]


def _stored_view(a, w: RowLocation, layout: GroupedLayout):
    """Inverse of `rows_view` for an (R, N) array (positions of no group get 0)."""
    if layout.data_layout == "N":
        return a.reshape(layout.original_shape)
    r, n = layout.rows, layout.cols
    inside = w.gid < w.counts.shape[0]
    at = jnp.where(inside[:, None], _flat_index(w, n), r * n)
    return jnp.zeros((r * n,), a.dtype).at[at.reshape(-1)].set(a.reshape(-1), mode="drop")


def _element_scales(scale_inv, w: RowLocation, layout: GroupedLayout):
    """Every element's block scale, gathered from the part's scale layout (its format's)."""
    g = jnp.minimum(w.gid, w.counts.shape[0] - 1)
    rows = GroupedRows(w.starts, w.counts, g, w.local)
    return format_of(layout.scaling_mode).grouped_element_scales(
        scale_inv, rows, layout.cols, colwise=layout.is_colwise, mode=layout.scaling_mode
    )


def _check_int32(layout: GroupedLayout, fn: str) -> None:
    if layout.rows * layout.cols >= 2**31:
        raise ValueError(
            f"{fn}: a grouped tensor of shape {layout.original_shape} has 2^31 or more "
            "elements, beyond the int32 indexing of this pure-JAX path. Dequantize the groups "
            "in several calls (e.g. split the tokens)."
        )


def dequantize_grouped(data, scale_inv, amax, group_sizes, layout: GroupedLayout):
    _check_int32(layout, "dequantize")
    w = locate_rows(group_sizes, layout)
    g = jnp.minimum(w.gid, group_sizes.shape[0] - 1)
    inside = (w.gid < group_sizes.shape[0])[:, None]
    q = rows_view(data, w, layout)
    fmt = format_of(layout.scaling_mode)
    y = fmt.decode_rows(q, scale_inv, amax, g, lambda: _element_scales(scale_inv, w, layout))
    out = fmt.round_to(jnp.where(inside, y, jnp.float32(0)), layout.dq_dtype)
    return out.reshape(layout.original_shape)


def _batched(fn, n_lead: int):
    for _ in range(n_lead):
        fn = jax.vmap(fn)
    return fn


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _dequantize_vjp(data, scale_inv, amax, group_sizes, layout: GroupedLayout):
    return _dequantize_jit(data, scale_inv, amax, group_sizes, layout)


@functools.partial(jax.jit, static_argnums=4)
def _dequantize_jit(data, scale_inv, amax, group_sizes, layout):
    fn = functools.partial(dequantize_grouped, layout=layout)
    return _batched(fn, group_sizes.ndim - 1)(data, scale_inv, amax, group_sizes)


def _dequantize_fwd(data, scale_inv, amax, group_sizes, layout):
    return _dequantize_vjp(data, scale_inv, amax, group_sizes, layout), (
        scale_inv,
        amax,
        group_sizes,
    )


def stored_cotangent(ct, group_sizes, layout: GroupedLayout):
    """The output cotangent moved to the stored layout (0 on rows of no group)."""
    _check_int32(layout, "grouped dequantize (VJP)")
    w = locate_rows(group_sizes, layout)
    a = ct.astype(jnp.float32).reshape(layout.rows, layout.cols)
    a = jnp.where((w.gid < group_sizes.shape[0])[:, None], a, 0.0)
    return _stored_view(a, w, layout)


def _dequantize_bwd(layout, res, ct):
    scale_inv, amax, group_sizes = res
    fn = functools.partial(stored_cotangent, layout=layout)
    ct_data = _batched(fn, group_sizes.ndim - 1)(ct, group_sizes)
    zeros = jax.tree.map(jnp.zeros_like, (scale_inv, amax))
    return (ct_data, *zeros, np.zeros(group_sizes.shape, jax.dtypes.float0))


_dequantize_vjp.defvjp(_dequantize_fwd, _dequantize_bwd)


def rows_from_stored(ct_data, group_sizes, layout: GroupedLayout):
    """A data cotangent in the stored layout back to x's layout (for the quantize STE)."""

    _check_int32(layout, "grouped quantize (VJP)")

    def one(d, gs):
        w = locate_rows(gs, layout)
        a = rows_view(d.astype(jnp.float32), w, layout)
        a = jnp.where((w.gid < gs.shape[0])[:, None], a, 0.0)
        return a.reshape(layout.original_shape)

    return _batched(one, group_sizes.ndim - 1)(ct_data, group_sizes)


def _concrete_bounds(group_sizes, layout: GroupedLayout, fn: str) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(group_sizes, jax.core.Tracer):
        raise ValueError(
            f"{fn} needs concrete group sizes (it returns arrays whose shapes depend on them): "
            "call it outside jit/vmap, on the tensor returned by a jitted function."
        )
    if group_sizes.ndim != 1:
        raise ValueError(
            f"{fn}: this part holds a batch of grouped problems (group_sizes of shape "
            f"{group_sizes.shape}); index one example first, e.g. jax.tree.map(lambda a: a[0], t)."
        )
    starts, counts = grouped.group_bounds(group_sizes, layout.rows_per_unit, layout.rows)
    return np.asarray(starts), np.asarray(counts)


@jaxtyped(typechecker=beartype)
class GroupedScaledTensor1x(AbstractScaledTensor):
    """One layout of a grouped quantized tensor (docs/grouped.md).

    **Fields:**

    - `data`: rowwise (and MXFP8 colwise) data in x's shape; tensor-scaling, NVFP4 and FP8
      block colwise data flat, each group's `(N, rows_g)` transpose at `start_g * N`.
    - `scale_inv`: float32 `(G,)` for tensor scaling; for MXFP8 and NVFP4 the flat buffer of
      per-group padded, swizzled (GEMM-ready) scale regions; for FP8 block scaling float32
      matrices with each group's blocks in its own rows or columns.
    - `amax`: float32 `(G,)`, each group's amax (0 for MXFP8 and FP8 block scaling).
    - `group_sizes`: int32 `(G,)`, entries of axis 0 per group.
    - static: `scaling_mode`, `original_shape`, `flatten_axis`, `dq_dtype`, `data_layout`
      ("N" or "T"), `is_colwise`.
    """

    data: Shaped[Array, "..."]
    scale_inv: Shaped[Array, "..."]
    amax: Float[Array, "*batch G"]
    group_sizes: Int[Array, "*batch G"]
    scaling_mode: ScalingMode = eqx.field(static=True)
    original_shape: tuple[int, ...] = eqx.field(static=True)
    flatten_axis: int = eqx.field(static=True)
    dq_dtype: str = eqx.field(static=True)
    data_layout: Literal["N", "T"] = eqx.field(static=True)
    is_colwise: bool = eqx.field(static=True, default=False)

    @property
    def _layout(self) -> GroupedLayout:
        return GroupedLayout(
            self.scaling_mode,
            self.original_shape,
            self.flatten_axis,
            self.dq_dtype,
            self.data_layout,
            self.is_colwise,
        )

    @property
    def num_groups(self) -> int:
        return self.group_sizes.shape[-1]

    @property
    def shape(self) -> tuple[int, ...]:
        """The original tensor's shape."""
        return self.original_shape

    @property
    def dtype(self) -> jnp.dtype:
        """The original tensor's dtype."""
        return jnp.dtype(self.dq_dtype)

    def dequantize(self, dtype=None) -> Shaped[Array, "..."]:
        """x's shape, in `dtype` (default x's); rows past the last group are 0.
        Straight-through gradient."""
        layout = self._layout
        if dtype is not None:
            layout = layout._replace(dq_dtype=float_dtype_name(dtype))
        return _dequantize_vjp(self.data, self.scale_inv, self.amax, self.group_sizes, layout)

    def group_part(self, g: int) -> ScaledTensor1x:
        """Group `g` as the dense `ScaledTensor1x` that `quantize(x_g, q_g)` returns for the
        group's rows `x_g` of the 2-D view (shape `(rows_g, N)`). Eager only."""
        return self._group_part(g, "group_part")

    def _group_part(self, g: int, fn: str) -> ScaledTensor1x:
        layout = self._layout
        starts, counts = _concrete_bounds(self.group_sizes, layout, fn)
        groups = counts.shape[0]
        if not isinstance(g, int) or isinstance(g, bool) or not 0 <= g < groups:
            raise ValueError(f"{fn}: g must be an int in [0, {groups}), got {g!r}.")
        start, count, n = int(starts[g]), int(counts[g]), layout.cols
        # The T layout's group g spans the flat elements [start n, (start + count) n): the rows
        # [start, start + count) of the (R, N) view, sliced there so that no index passes int32.
        data = self.data.reshape(layout.rows, n)[start : start + count]
        if layout.data_layout != "N":
            data = data.reshape(n, count)
        return ScaledTensor1x(
            data=data,
            scale_inv=self._group_scales(g, starts, counts),
            amax=self.amax[g : g + 1],
            scaling_mode=self.scaling_mode,
            data_layout=self.data_layout,
            flatten_axis=1,
            ndim=2,
            dq_dtype=self.dq_dtype,
            is_colwise=self.is_colwise,
        )

    def scale_inv_for_group(self, g: int) -> Shaped[Array, "..."]:
        """Group `g`'s scales, unswizzled, in the dense part's `scale_inv` shape. Eager only."""
        return self._group_part(g, "scale_inv_for_group").scale_inv

    def _group_scales(self, g, starts, counts):
        fmt = format_of(self.scaling_mode)
        if not fmt.is_block:
            return self.scale_inv[g : g + 1]
        return fmt.grouped_scale_tile(self.scale_inv, starts, counts, g, self._layout.cols,
                                      colwise=self.is_colwise, mode=self.scaling_mode)


@jaxtyped(typechecker=beartype)
class GroupedScaledTensor(AbstractLayoutPair):
    """The result of `eqx_quant.grouped_quantize`: a rowwise and/or a colwise
    `GroupedScaledTensor1x` (None where the layout did not ask for it)."""

    rowwise: GroupedScaledTensor1x | None
    colwise: GroupedScaledTensor1x | None

    @property
    def group_sizes(self) -> Int[Array, "*batch G"]:
        return self._first.group_sizes

    @property
    def amax(self) -> Float[Array, "*batch G"]:
        """Each group's amax (float32 `(G,)`); feed it to `GroupedDelayedScaleQuantizer.update`."""
        return self._first.amax

    @property
    def original_shape(self) -> tuple[int, ...]:
        return self._first.original_shape

    def scale_inv_for_group(self, g: int) -> Shaped[Array, "..."]:
        """Group `g`'s unswizzled scales of the rowwise (else colwise) part. Eager only."""
        return self._first.scale_inv_for_group(g)
