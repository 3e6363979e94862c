"""Pure-JAX reference of the grouped ops (docs/grouped.md), built from the dense references.

Each group is quantized by the dense reference on the group's rows moved to the top of a
zero-padded copy of the 2-D view (`_group_rows`): the zero rows below a group change
neither its amaxes, its partial blocks (quantized as if zero-padded) nor the global element
indices of its stochastic rounding, so every group equals the dense op on its own rows by
construction. The groups run in a `lax.scan` (one traced body, G iterations): G times the
dense work, which is fine for a reference; the kernels do one pass.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float, Int, Shaped

from .._core import varying_axes
from . import blocks_nd, fp8_block, mxfp8
from .fp8 import fp8_quantize, reciprocal
from .ieee import add, bits, from_bits, max_abs
from .nvfp4 import NVFP4_BLOCK

SWIZZLE_ROWS = mxfp8.SWIZZLE_ROWS
SWIZZLE_COLS = mxfp8.SWIZZLE_COLS


def _pad(n, multiple: int):
    return (n + multiple - 1) // multiple * multiple


def most_units(rows: int, groups: int, unit: int) -> int:
    """`W(R, G, u)`: the largest `sum_g ceil(rows_g / u)` over group sizes summing to <= R."""
    if rows == 0:
        return 0
    k = min(groups, rows)
    return k - 1 + -(-(rows - k + 1) // unit)


def scale_buffer_length(rows: int, cols: int, groups: int, block: int, colwise: bool) -> int:
    """Static length of a grouped part's swizzled scale buffer (docs/grouped.md)."""
    if colwise:
        return _pad(cols, SWIZZLE_ROWS) * SWIZZLE_COLS * most_units(rows, groups, 4 * block)
    blocks = _pad(-(-cols // block), SWIZZLE_COLS)
    return SWIZZLE_ROWS * blocks * most_units(rows, groups, SWIZZLE_ROWS)


def group_bounds(
    group_sizes: Int[Array, " G"], rows_per_unit: int, rows: int
) -> tuple[Int[Array, " G"], Int[Array, " G"]]:
    """`(start_g, rows_g)` with the clamping of docs/grouped.md (never past `rows`)."""
    units = rows // rows_per_unit
    clamped = jnp.clip(group_sizes.astype(jnp.int32), 0, units) * rows_per_unit

    # Saturating prefix sums: min(a + b, R) is associative on [0, R] and never overflows.
    ends = lax.associative_scan(lambda a, b: jnp.minimum(a + b, rows), clamped)
    starts = jnp.concatenate([jnp.zeros((1,), jnp.int32), ends[:-1]])
    return starts, ends - starts


def row_groups(starts: Int[Array, " G"], counts: Int[Array, " G"], rows: int) -> Int[Array, " R"]:
    """The group of every row of the 2-D view; `G` for rows past the last group."""
    ends = starts + counts
    r = jnp.arange(rows, dtype=jnp.int32)
    if varying_axes(ends):
        # Inside shard_map jnp.searchsorted rejects device-varying operands: count the ends
        # at or before each row instead (the same integers; XLA fuses the reduction).
        return jnp.sum(ends[None, :] <= r[:, None], axis=1, dtype=jnp.int32)
    return jnp.searchsorted(ends, r, side="right").astype(jnp.int32)


# Up to this many (group, row) pairs, `group_amax` takes each group's max over a mask of its
# rows (one small fusion) instead of a segment max (a scatter whose few targets serialize its
# atomics: 14 us for 16384 rows in 8 groups on an H200). Both give the same bits.
_MASKED_GROUP_MAX_PAIRS = 1 << 22


def group_amax(x: Shaped[Array, "R N"], group_sizes, rows_per_unit: int) -> Float[Array, " G"]:
    """Per-group NaN-ignoring `max |x|` (0 for an empty group), exact for subnormals."""
    r = x.shape[0]
    starts, counts = group_bounds(group_sizes, rows_per_unit, r)
    g = group_sizes.shape[0]
    if x.size == 0:
        return jnp.zeros((g,), jnp.float32)
    # Max of non-negative floats = max of their bits.
    per_row = bits(jax.vmap(max_abs)(x))
    if g * r <= _MASKED_GROUP_MAX_PAIRS:
        i = jnp.arange(r, dtype=jnp.int32)[None, :]
        mine = (i >= starts[:, None]) & (i < (starts + counts)[:, None])
        best = jnp.max(jnp.where(mine, per_row[None, :], jnp.uint32(0)), axis=1)
    else:  # rows of no group land in segment G
        gid = row_groups(starts, counts, r)
        best = jax.ops.segment_max(per_row, gid, num_segments=g + 1)[:g]
        best = jnp.maximum(best, jnp.uint32(0))
    return from_bits(best)


def _group_rows(x, start, count):
    """The group's rows moved to the top of an (R, N) array, zeros below them."""
    r = jnp.arange(x.shape[0], dtype=jnp.int32)
    source = jnp.clip(r + start, 0, max(x.shape[0] - 1, 0))
    return jnp.where((r < count)[:, None], x[source], jnp.zeros((), x.dtype))


def _place_rows(out, dense, gid, g, start):
    """Write the group's rows (the top `count` rows of `dense`) back to their place."""
    r = jnp.arange(out.shape[0], dtype=jnp.int32)
    source = jnp.clip(r - start, 0, max(out.shape[0] - 1, 0))
    return jnp.where((gid == g)[:, None], dense[source], out)


def _place_transposed(out, dense_t, start, count, cols):
    """Write the group's `(N, count)` block (the first `count` columns of `dense_t`, shape
    `(N, R)`) into the flat T buffer at `start * N`."""
    p = jnp.arange(out.shape[0], dtype=jnp.int32)
    q = p - start * cols
    inside = (q >= 0) & (q < count * cols)
    safe = jnp.maximum(count, 1)
    n, j = jnp.clip(q // safe, 0, cols - 1), jnp.clip(q % safe, 0, max(dense_t.shape[1] - 1, 0))
    return jnp.where(inside, dense_t[n, j], out)


class ScaleRegions(NamedTuple):
    """Where each group's scale matrix T_g lives in a grouped part's swizzled buffer: its
    shape `(tile_rows, tile_cols)`, its padded column count `padded_cols` (a multiple of 4)
    and the offset of its region (docs/grouped.md, "Block scales")."""

    tile_rows: Array
    tile_cols: Array
    padded_cols: Array
    offsets: Array

    @property
    def padded_rows(self) -> Array:
        return _pad(self.tile_rows, SWIZZLE_ROWS)


def scale_regions(counts, cols: int, block: int, colwise: bool) -> ScaleRegions:
    """The regions of groups with `counts` rows (rows of T_g: N colwise, rows_g rowwise)."""
    if colwise:
        tr = jnp.full_like(counts, cols)
        tc = (counts + block - 1) // block
    else:
        tr = counts
        tc = jnp.full_like(counts, -(-cols // block))
    qc = _pad(tc, SWIZZLE_COLS)
    size = _pad(tr, SWIZZLE_ROWS) * qc
    return ScaleRegions(tr, tc, qc, jnp.cumsum(size) - size)


def _place_scales(buffer, tile, regions: ScaleRegions, g):
    """Scatter the valid corner of `tile` (group g's T_g) into its swizzled region."""
    i = jnp.arange(tile.shape[0], dtype=jnp.int32)[:, None]
    j = jnp.arange(tile.shape[1], dtype=jnp.int32)[None, :]
    at = regions.offsets[g] + mxfp8.swizzle_offset(i, j, regions.padded_cols[g])
    valid = (i < regions.tile_rows[g]) & (j < regions.tile_cols[g])
    at = jnp.where(valid, at, buffer.shape[0])  # out of range: dropped
    return buffer.at[at.reshape(-1)].set(tile.reshape(-1), mode="drop")


def _scan_groups(x, group_sizes, rows_per_unit, init, body):
    """Run `body(carry, g, start, count, gid)` for every group in a `lax.scan`."""
    r = x.shape[0]
    if x.size >= 2**31:
        raise ValueError(
            f"eqx_quant grouped reference: x of shape {x.shape} has 2^31 or more elements, "
            "beyond the int32 indexing of the pure-JAX reference. Use the compiled kernels "
            "(impl='auto' on CPU or CUDA), or split the tokens into several calls."
        )
    starts, counts = group_bounds(group_sizes, rows_per_unit, r)
    gid = row_groups(starts, counts, r)
    g = jnp.arange(group_sizes.shape[0], dtype=jnp.int32)

    def step(carry, inputs):
        gi, start, count = inputs
        return body(carry, gi, start, count, gid), None

    # Inside shard_map the carry must be device-varying like x (the scan type-checks it).
    axes = tuple(jax.typeof(x).manual_axis_type.varying)
    if axes:
        init = jax.tree.map(lambda a: lax.pcast(a, axes, to="varying"), init)
    out, _ = lax.scan(step, init, (g, starts, counts))
    return out, starts, counts


def _empty(dtype) -> Array:
    return jnp.zeros((0,), dtype)


def grouped_fp8_quantize(x, scale, group_sizes, *, q_dtype, rows_per_unit, rowwise, colwise):
    """`(row, col, scale_inv, amax)` of one example (docs/grouped.md)."""
    r, n = x.shape
    q = jnp.dtype(q_dtype)
    init = (
        jnp.zeros((r, n), q) if rowwise else _empty(q),
        jnp.zeros((r * n,), q) if colwise else _empty(q),
    )

    def body(carry, g, start, count, gid):
        row, col = carry
        xg = _group_rows(x, start, count)
        d_row, d_col, *_ = fp8_quantize(
            xg,
            scale[g].reshape(1),
            q_dtype=q_dtype,
            flatten_axis=1,
            rowwise=rowwise,
            colwise=colwise,
            with_dbias=False,
        )
        if rowwise:
            row = _place_rows(row, d_row, gid, g, start)
        if colwise:
            col = _place_transposed(col, d_col, start, count, n)
        return row, col

    (row, col), _, _ = _scan_groups(x, group_sizes, rows_per_unit, init, body)
    amax = group_amax(x, group_sizes, rows_per_unit)
    return row, col, reciprocal(scale), amax


def _grouped_blocks(x, group_sizes, *, rows_per_unit, rowwise, colwise, block, col_flat,
                    data_dtype, quantize_group):
    """Shared driver of the MXFP8 / NVFP4 grouped references. `quantize_group(xg, g, count)`
    returns the dense `(row, row_scale, col, col_scale)` of the group's `count` rows on top;
    `col_flat`: colwise data in the flat T layout (NVFP4) instead of x's layout (MXFP8)."""
    r, n = x.shape
    groups = group_sizes.shape[0]
    row_len = scale_buffer_length(r, n, groups, block, colwise=False)
    col_len = scale_buffer_length(r, n, groups, block, colwise=True)
    init = (
        jnp.zeros((r, n), data_dtype) if rowwise else _empty(data_dtype),
        jnp.zeros((row_len,), jnp.uint8) if rowwise else _empty(jnp.uint8),
        jnp.zeros((r * n,) if col_flat else (r, n), data_dtype) if colwise else _empty(data_dtype),
        jnp.zeros((col_len,), jnp.uint8) if colwise else _empty(jnp.uint8),
    )
    starts, counts = group_bounds(group_sizes, rows_per_unit, r)
    row_regions = scale_regions(counts, n, block, colwise=False)
    col_regions = scale_regions(counts, n, block, colwise=True)

    def body(carry, g, start, count, gid):
        row, row_s, col, col_s = carry
        d_row, d_row_s, d_col, d_col_s = quantize_group(_group_rows(x, start, count), g, count)
        if rowwise:
            row = _place_rows(row, d_row, gid, g, start)
            row_s = _place_scales(row_s, d_row_s, row_regions, g)
        if colwise:
            if col_flat:  # T layout (N, R): its scales (N, ceil(R/B)) are already T_g
                col = _place_transposed(col, d_col, start, count, n)
                tile = d_col_s
            else:  # x's layout; scales (ceil(R/B), N) transposed to T_g
                col = _place_rows(col, d_col, gid, g, start)
                tile = d_col_s.T
            col_s = _place_scales(col_s, tile, col_regions, g)
        return row, row_s, col, col_s

    out, _, _ = _scan_groups(x, group_sizes, rows_per_unit, init, body)
    return out


def grouped_mxfp8_quantize(x, group_sizes, *, q_dtype, rows_per_unit, rowwise, colwise):
    """`(row, row_scale, col, col_scale)` of one example; scales as E8M0 bytes."""

    def quantize_group(xg, g, count):
        del g, count
        return blocks_nd.mxfp8_quantize(xg, q_dtype, 0, rowwise, colwise)

    return _grouped_blocks(
        x,
        group_sizes,
        rows_per_unit=rows_per_unit,
        rowwise=rowwise,
        colwise=colwise,
        block=mxfp8.MX_BLOCK,
        col_flat=False,
        data_dtype=jnp.dtype(q_dtype),
        quantize_group=quantize_group,
    )


def grouped_nvfp4_quantize(
    x, amax, keys, group_sizes, *, rows_per_unit, rowwise, colwise, use_2d, stochastic_rounding
):
    """`(row, row_scale, col, col_scale)` of one example as E2M1 codes / E4M3 bytes."""
    def quantize_group(xg, g, count):
        a = amax[g].reshape(1)
        return blocks_nd.nvfp4_quantize(
            xg,
            a,
            a,
            keys[g],
            jnp.zeros((2,), jnp.int32),
            block_axis=0,
            rowwise=rowwise,
            colwise=colwise,
            use_2d=use_2d,
            use_rht=False,
            sign_mask=0,
            stochastic_rounding=stochastic_rounding,
            # The group is the (count, N) tensor (its colwise SR index runs over T = (N, count));
            # xg holds it on top of zero rows.
            global_shape=(count, xg.shape[1]),
        )

    return _grouped_blocks(
        x,
        group_sizes,
        rows_per_unit=rows_per_unit,
        rowwise=rowwise,
        colwise=colwise,
        block=NVFP4_BLOCK,
        col_flat=True,
        data_dtype=jnp.uint8,
        quantize_group=quantize_group,
    )


def first_units(counts: Int[Array, " G"], unit: int) -> Int[Array, " G"]:
    """`u_g = sum_{h<g} ceil(rows_h / unit)`: where group g's blocks of `unit` rows begin in
    a grouped part's stacked scale matrix (FP8 block scaling's colwise and 128x128 scales)."""
    units = (counts + unit - 1) // unit
    return jnp.cumsum(units) - units


def grouped_fp8_block_quantize(x, group_sizes, *, q_dtype, use_2d, power_2_scales, epsilon,
                               rows_per_unit, rowwise, colwise, quantize_dense=None):
    """`(row, row_scale, col, col_scale)` of one example (docs/grouped.md, "FP8 block
    scaling"): data as the per-tensor op's (rowwise `(R, N)`, colwise the flat T layout),
    float32 scale_inv matrices. 1x128: rowwise `(R, nb)`, row r's blocks; colwise `(N, U)`,
    group g's `(N, ceil(rows_g/128))` in columns `[u_g, ...)`. 128x128: rowwise `(U, nb)`,
    group g's tiles in rows `[u_g, ...)`; colwise `(nb, U)`, their transpose. `nb =
    ceil(N/128)`, `U = most_units(R, G, 128)`, `u_g = first_units(...)[g]`.

    `quantize_dense(x2d, transposed) -> (data, scale_inv)` quantizes a dense 2-D view (of
    `x2d.T` with `transposed`) with this call's block and settings; by default the pure-JAX
    `fp8_block.quantize_2d` (the op passes the dense op, which has kernels)."""
    r, n = x.shape
    block = fp8_block.BLOCK
    units = most_units(r, group_sizes.shape[0], block)
    nb = -(-n // block)
    q = jnp.dtype(q_dtype)
    f32 = jnp.float32
    if quantize_dense is None:
        def quantize_dense(x2d, transposed):
            return fp8_block.quantize_2d(x2d.T if transposed else x2d, q_dtype=q_dtype,
                                         use_2d=use_2d, power_2_scales=power_2_scales,
                                         epsilon=epsilon)
    groups = group_sizes.shape[0]
    starts, counts = group_bounds(group_sizes, rows_per_unit, r)
    first = first_units(counts, block)
    gid = row_groups(starts, counts, r)
    inside = gid < groups
    row, row_s = _empty(q), _empty(f32)
    col, col_s = _empty(q), _empty(f32)
    if rowwise and not use_2d:
        # A 1x128 block lies in one row, so one dense pass over x with the rows of no group
        # zeroed gives every group's bytes and scales (and all-zero blocks past the sum).
        row, row_s = quantize_dense(jnp.where(inside[:, None], x, jnp.zeros((), x.dtype)),
                                    False)
    if not (colwise or use_2d):
        return row, row_s, col, col_s
    if r * n == 0 or groups == 0:
        if use_2d and rowwise:
            row, row_s = jnp.zeros((r, n), q), jnp.zeros((units, nb), f32)
        if colwise:
            col = jnp.zeros((r * n,), q)
            col_s = jnp.zeros((nb, units) if use_2d else (n, units), f32)
        return row, row_s, col, col_s
    if block * units * n >= 2**31:
        raise ValueError(
            f"eqx_quant grouped reference: x of shape {x.shape} has too many elements for the "
            "int32 indexing of the pure-JAX reference. Split the tokens into several calls."
        )
    # Every group's rows moved to row 128 u_g of a (128 U, N) buffer, zeros elsewhere: one
    # dense pass over it quantizes each group's blocks from its own first row, a partial
    # last block holding zeros below the group's rows as the group alone would.
    g = jnp.minimum(gid, groups - 1)
    rows = jnp.arange(r, dtype=jnp.int32)
    padded_rows = block * units
    to_padded = jnp.where(inside, block * first[g] + rows - starts[g], padded_rows)
    padded = jnp.zeros((padded_rows, n), x.dtype).at[to_padded].set(x, mode="drop")
    # Units past the last group's are all-zero blocks; their scales are 0 as in the layout.
    used = jnp.arange(units, dtype=jnp.int32) < jnp.sum((counts + block - 1) // block)
    if use_2d:
        d, s = quantize_dense(padded, False)
        s = jnp.where(used[:, None], s, jnp.zeros((), f32))
        if rowwise:
            row = jnp.where(inside[:, None], d[jnp.minimum(to_padded, padded_rows - 1)],
                            jnp.zeros((), q))
            row_s = s
        if colwise:
            col = _gather_transposed(d.reshape(-1), gid, starts, counts, first, n, block,
                                     lambda i, j: j * n + i)
            col_s = s.T
    else:
        d_t, s_t = quantize_dense(padded, True)
        col = _gather_transposed(d_t.reshape(-1), gid, starts, counts, first, n, block,
                                 lambda i, j: i * padded_rows + j)
        col_s = jnp.where(used[None, :], s_t, jnp.zeros((), f32))
    return row, row_s, col, col_s


def _gather_transposed(source, gid, starts, counts, first, cols, block, flat_index):
    """The flat T buffer (group g's `(N, rows_g)` transpose at `start_g * N`, zeros past the
    last group) from quantized values of the padded buffer: element `(i, j)` of group g is
    `source[flat_index(i, 128 u_g + j)]`. The buffer is built as `(R, N)`: its row m holds
    elements of row m's group (the group's slab spans its rows' ranges), so every per-group
    quantity is a per-row vector broadcast along the row."""
    groups = counts.shape[0]
    g = jnp.minimum(gid, groups - 1)[:, None]
    rows = jnp.arange(gid.shape[0], dtype=jnp.int32)[:, None]
    offset = (rows - starts[g]) * cols + jnp.arange(cols, dtype=jnp.int32)[None, :]
    count = jnp.maximum(counts[g], 1)
    i, j = offset // count, offset % count
    values = source[flat_index(i, block * first[g] + j)]
    return jnp.where((gid < groups)[:, None], values, jnp.zeros((), source.dtype)).reshape(-1)


def prefix_tree_sum(v: Float[Array, "R N"], count) -> Float[Array, " N"]:
    """The canonical tree sum (`tree.py`) of the first `count` rows of `v` (traced count),
    +0 when `count` is 0. Each row is placed at its leaf slot of the tree over `count`
    values, padded to `2^ceil(log2 R)` with -0.0 (the identity of IEEE addition)."""
    r, n = v.shape
    depth = max(0, (r - 1).bit_length())
    width = 1 << depth
    i = jnp.arange(r, dtype=jnp.int32)
    begin, size, slot = jnp.zeros_like(i), jnp.full_like(i, count), jnp.zeros_like(i)
    for level in range(depth):
        half = (size + 1) // 2
        right = (i >= begin + half) & (size > 1)
        slot = slot + jnp.where(right, 1 << (depth - 1 - level), 0)
        begin = jnp.where(right, begin + half, begin)
        size = jnp.where(size > 1, jnp.where(right, size - half, half), size)
    slot = jnp.where(i < count, slot, width)  # rows past the count: dropped
    leaves = jnp.full((width, n), -0.0, jnp.float32).at[slot].set(
        v.astype(jnp.float32), mode="drop"
    )
    for _ in range(depth):
        leaves = leaves.reshape(leaves.shape[0] // 2, 2, n)
        leaves = lax.optimization_barrier(add(leaves[:, 0], leaves[:, 1]))
    total = leaves.reshape(n)
    return jnp.where(count > 0, total, jnp.zeros_like(total))


def grouped_dbias(x, group_sizes, *, rows_per_unit) -> Float[Array, "G N"]:
    """Per-group canonical tree sums of the group's rows (float32, not yet cast)."""
    r, n = x.shape
    init = jnp.zeros((group_sizes.shape[0], n), jnp.float32)

    def body(out, g, start, count, gid):
        del gid
        if r == 0:
            return out
        return out.at[g].set(prefix_tree_sum(_group_rows(x, start, count), count))

    out, _, _ = _scan_groups(x, group_sizes, rows_per_unit, init, body)
    return out


def grouped_mxfp8_rows_bf16(data, scales, group_sizes, *, rows_per_unit: int):
    """A grouped MXFP8 rowwise part's `(R, N)` rows as bfloat16 (`data`: FP8 `(R, N)`,
    `scales`: its swizzled uint8 buffer): each payload times its E8M0 block scale, rounded
    once; rows of no group 0 (what the grouped GEMM multiplies on Hopper)."""
    r, n = data.shape
    groups = group_sizes.shape[0]
    starts, counts = group_bounds(group_sizes, rows_per_unit, r)
    gid = row_groups(starts, counts, r)
    g = jnp.minimum(gid, groups - 1)
    regions = scale_regions(counts, n, mxfp8.MX_BLOCK, colwise=False)
    nb = -(-n // mxfp8.MX_BLOCK)
    i = (jnp.arange(r, dtype=jnp.int32) - starts[g])[:, None]
    j = jnp.arange(nb, dtype=jnp.int32)[None, :]
    at = regions.offsets[g][:, None] + mxfp8.swizzle_offset(i, j, regions.padded_cols[g][:, None])
    inside = (gid < groups)[:, None]
    at = jnp.where(inside, at, 0)
    e = mxfp8.byte_view(scales)[at]
    q = jnp.pad(mxfp8.byte_view(data), ((0, 0), (0, nb * mxfp8.MX_BLOCK - n)))
    y = mxfp8.decode_blocks(q.reshape(-1, mxfp8.MX_BLOCK), e.reshape(-1),
                            q_name=mxfp8.dtype_name(data.dtype))
    y = y.reshape(r, nb * mxfp8.MX_BLOCK)[:, :n]
    return mxfp8.round_to_dtype(jnp.where(inside, y, jnp.float32(0)), jnp.bfloat16)
