"""Expert parallelism: the experts split over a mesh axis, each device's work local.

After the token dispatch (an all-to-all that the model does), device d of the expert axis
holds experts `[d * G/D, (d+1) * G/D)` and a block of `M/D` token rows: those experts'
tokens, sorted by expert, then padding. Its slice of `group_sizes` counts its own experts'
rows; they sum to at most `M/D`, and rows past them give 0. Every grouped op then runs on the
device's own rows and experts: no gather of tokens or weights, and per-expert scales,
amaxes and states stay where their expert is. Gradients work (the layer is a `shard_map`
with `check_vma=True`; see `_core/_manual.py`).
"""

import jax
import numpy as np
from jax.sharding import PartitionSpec as P


def expert_parallel(fn, expert_axis: str, x, kernel, group_sizes, bias, q_arrays, receivers,
                    key, check: bool):
    """`fn(x, kernel, sizes, bias, q_arrays, receivers, key)` on each device's rows and
    experts of `expert_axis` (every array with a leading expert axis is split along it)."""
    where = "grouped_dense"
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or expert_axis not in mesh.axis_names:
        raise ValueError(
            f"{where}: expert_axis={expert_axis!r} must name an axis of the current mesh; set "
            f"it with `with jax.sharding.use_mesh(mesh):` or `jax.set_mesh(mesh)` (mesh axes "
            f"now: {tuple(mesh.axis_names) if not mesh.empty else 'no mesh'})."
        )
    devices = mesh.shape[expert_axis]
    groups, rows = kernel.shape[0], x.shape[0]
    if groups % devices or rows % devices:
        raise ValueError(
            f"{where}: expert_axis {expert_axis!r} has {devices} devices, which must divide the "
            f"expert count ({groups}) and the token rows ({rows}); pad the rows to a multiple "
            f"of {devices} (padding rows past each device's groups give 0)."
        )
    split = P(expert_axis)

    def spec_of(a):
        return split if a.ndim and a.shape[0] == groups else P()

    q_specs = jax.tree.map(spec_of, q_arrays)
    r_specs = jax.tree.map(spec_of, receivers)
    b_spec = None if bias is None else split

    if check and not isinstance(group_sizes, jax.core.Tracer):
        # Eager: each device's experts' counts against its rows. (Under jit no run-time
        # check: a raising host callback on one device would leave the others waiting in
        # the step's collectives. A device given more tokens than rows keeps the first
        # M/D, as a capacity-limited dispatch does.)
        per_device = np.asarray(group_sizes).reshape(devices, -1).sum(axis=1)
        if np.any(per_device > rows // devices) or np.any(np.asarray(group_sizes) < 0):
            raise ValueError(
                f"{where} (expert_axis={expert_axis!r}): each device's group_sizes (its own "
                f"experts' token counts) must be non-negative and sum to at most its rows "
                f"({rows} / {devices} = {rows // devices}), got per-device sums "
                f"{per_device.tolist()}; route at most that many tokens to each device."
            )

    def local(x, kernel, sizes, bias, q_arrays, receivers, key):
        if key is not None:  # each device its own random bits
            key = jax.random.fold_in(key, jax.lax.axis_index(expert_axis))
        return fn(x, kernel, sizes, bias, q_arrays, receivers, key)

    in_specs = (split, split, split, b_spec, q_specs, r_specs, P())
    args = (x, kernel, group_sizes, bias, q_arrays, receivers, key)
    if jax.sharding.AxisType.Explicit in tuple(mesh.axis_types):
        # Explicit axes: the values' types must carry the split (a no-op where they do).
        args = tuple(
            a if a is None else jax.tree.map(
                lambda sp, v: jax.sharding.reshard(v, sp), spec, a,
                is_leaf=lambda t: isinstance(t, P))
            for a, spec in zip(args, in_specs)
        )
    return jax.shard_map(
        local, mesh=mesh, in_specs=in_specs, out_specs=split, axis_names={expert_axis},
    )(*args)
