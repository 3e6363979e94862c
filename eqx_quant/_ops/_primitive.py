"""Declare an op once: abstract eval, batching, sharding rule, partition, reference, FFI targets.

This is the only module that touches `jax.extend.core`, `jax.interpreters` and `jax._src`, so
the mechanism can be swapped (e.g. for `shard_map`-based partitioning) by changing one file.

Each op gets two primitives:

- the **outer** primitive is what public code binds. Its abstract eval and batching rule are
  the op's own; its lowering goes through `jax.experimental.custom_partitioning`, whose
  `partition` callback returns a function of the LOCAL shards (plus any collectives the op
  needs, e.g. a global amax).
- the **inner** primitive runs on one device. Its lowering is the compiled FFI kernel
  `eqx_quant_<op>_<platform>` where one was built, or the pure-JAX reference when the caller
  asked for `impl="reference"` or runs on a platform we never build for. Asking for a kernel
  that was not built raises; nothing falls back silently.
"""

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax._src.dispatch as _dispatch
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir
from jax.sharding import AxisType

from .._core import vary_like, varying_axes
from . import _ffi


class _ArgInfo(NamedTuple):
    """What `OpSpec.partition` reads of an argument."""

    shape: tuple[int, ...]
    dtype: Any
    sharding: Any


def _typed_shardings(spec, params, avals, results):
    """Under Explicit mesh axes every value's type carries its sharding: give each result
    the sharding the op's partition rule produces (without it, a custom VJP whose primal
    input is typed `bf16[64@data, 32]` gets an untyped cotangent and JAX rejects it)."""
    sharding = getattr(avals[0], "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or not any(t == AxisType.Explicit for t in mesh.axis_types):
        return results
    infos = [_ArgInfo(a.shape, a.dtype, a.sharding) for a in avals]
    result_infos = [_ArgInfo(r.shape, r.dtype, None) for r in results]
    _, result_specs, _ = spec.partition(params, mesh, infos, result_infos)
    return tuple(
        r.update(sharding=jax.sharding.NamedSharding(mesh, s))
        for r, s in zip(results, result_specs)
    )


def _traced_as_manual(mesh, local_fn):
    """`local_fn` traced with every mesh axis Manual: the body of a partition runs on one
    device's shards, and under Explicit axes (`jax.make_mesh`'s default with `jax.set_mesh`)
    its collectives (the amax `pmax`) are otherwise rejected."""
    abstract = mesh.abstract_mesh
    if all(t == AxisType.Manual for t in abstract.axis_types):
        return local_fn
    manual = abstract.update_axis_types({a: AxisType.Manual for a in abstract.axis_names})

    def run(*args):
        with jax.sharding.use_abstract_mesh(manual):
            return local_fn(*args)

    return run


def map_examples(fn, n_batch: int, arrays, result_avals) -> tuple:
    """`fn` (a reference of one example) over the `n_batch` leading (vmapped) dims of every
    array, its results reshaped to `result_avals`. The batch dims are flattened to one of an
    explicit size: `-1` cannot be resolved for examples of zero elements (an empty `x`, or
    the `(0,)` key words of a call without stochastic rounding)."""
    size = math.prod(arrays[0].shape[:n_batch])
    flat = [a.reshape((size,) + a.shape[n_batch:]) for a in arrays]
    outs = jax.vmap(fn)(*flat)
    return tuple(o.reshape(a.shape) for o, a in zip(outs, result_avals))


def batch_size(args, dims) -> int:
    """The size of the mapped dims of a batching rule's `args`."""
    return next(a.shape[d] for a, d in zip(args, dims) if d is not None)


def batch_first(args, dims) -> tuple[int, tuple]:
    """The batch size of a batching rule's `args` and the args with their mapped dim moved to
    the front (unmapped ones broadcast to it)."""
    size = batch_size(args, dims)
    moved = tuple(
        jnp.broadcast_to(a, (size,) + a.shape) if d is None else jnp.moveaxis(a, d, 0)
        for a, d in zip(args, dims)
    )
    return size, moved


def fold_batch_into_rows(params, args, dims):
    """An OpSpec `batch` for ops whose every operand and result lead with rows that examples
    may stack: the examples become more rows of one call (undone by `unfold_rows`)."""
    size, moved = batch_first(args, dims)
    return params, tuple(a.reshape((size * a.shape[1],) + a.shape[2:]) for a in moved), (0,)


def unfold_rows(params, args, dims, outs):
    """The OpSpec `batch_outputs` of `fold_batch_into_rows`: the examples' rows split off."""
    del params
    size = batch_size(args, dims)
    return tuple(y.reshape((size, y.shape[0] // size) + y.shape[1:]) for y in outs)


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """Everything that defines one op. All callables take the op's hashable `params` first;
    `params` itself carries `impl` and `ffi_attrs()` (the kernel's attributes as typed numpy
    scalars / arrays / bools).

    - `name`: base name; FFI targets are `eqx_quant_<name>_cpu` / `eqx_quant_<name>_cuda`.
    - `abstract_eval(params, *avals) -> tuple[ShapedArray, ...]`: the public (outer) results.
    - `inner_abstract_eval(params, *avals)`: the kernel's (inner) results, which may hold
      partial reductions that `unsharded` / `partition` finish.
    - `reference(params, *arrays) -> tuple[Array, ...]`: pure JAX, bit-exact with the kernels.
    - `batch(params, args, dims) -> (params', args', out_dims)`: rebinds with new params;
      `batch_outputs(params, args, dims, outs) -> outs`, if given, then maps the rebound
      results (e.g. unfolds a batch folded into rows).
    - `sharding_rule(params, mesh, value_types, result_types) -> str`: Shardy rule.
    - `partition(params, mesh, arg_infos, result_infos) -> (local_fn, result_specs, arg_specs)`:
      `local_fn(bind_inner, *local_args)` computes the local result (and any collectives).
    - `unsharded(params, bind_inner, *args)`: the same on one device (no collectives); by
      default the inner op on the same arguments.
    - `kernel_platforms`: the platforms with a compiled kernel; elsewhere the inner
      primitive lowers to the reference (the grouped GEMM is XLA's `ragged_dot` on CPU).
    - `ffi_off_kernel_platforms`: what `impl="ffi"` does on a platform without a kernel:
      `"reference"` (the op's documented lowering there) or `"error"`.
    """

    name: str
    abstract_eval: Callable[..., tuple]
    inner_abstract_eval: Callable[..., tuple]
    reference: Callable[..., tuple]
    batch: Callable[..., tuple]
    sharding_rule: Callable[..., str]
    partition: Callable[..., tuple]
    unsharded: Callable[..., tuple] | None = None
    kernel_platforms: tuple[str, ...] = ("cpu", "cuda")
    batch_outputs: Callable[..., tuple] | None = None
    ffi_off_kernel_platforms: str = "reference"


class Op:
    """The two primitives of an `OpSpec`; call `op.bind(*args, params=...)`."""

    def __init__(self, spec: OpSpec):
        self.spec = spec
        self.inner = Primitive(f"eqx_quant_{spec.name}")
        self.inner.multiple_results = True
        self.outer = Primitive(f"eqx_quant_{spec.name}_partitioned")
        self.outer.multiple_results = True
        self.inner.def_abstract_eval(
            lambda *avals, params: spec.inner_abstract_eval(params, *avals)
        )
        self.outer.def_abstract_eval(
            lambda *avals, params: _typed_shardings(
                spec, params, avals, spec.abstract_eval(params, *avals)
            )
        )
        for prim in (self.inner, self.outer):
            prim.def_impl(functools.partial(_dispatch.apply_primitive, prim))
        self._register_inner_lowerings()
        self._register_outer()

    def bind(self, *args, params):
        # Inside shard_map (check_vma=True) the results vary over every manual axis an input
        # varies over, as for JAX's own primitives; the abstract eval does not know the
        # manual axes, so the results are typed here.
        axes = tuple(sorted({a for x in args for a in varying_axes(x)}))
        if not axes:
            return self.outer.bind(*args, params=params)
        args = [vary_like(x, axes) for x in args]
        return [vary_like(r, axes) for r in self.outer.bind(*args, params=params)]

    def bind_inner(self, *args, params):
        return self.inner.bind(*args, params=params)

    # ---- inner: kernels or reference -------------------------------------------------------
    def _register_inner_lowerings(self) -> None:
        spec = self.spec
        def reference(*args, params):
            # The inner primitive runs on one device's values (the body of a partition, or an
            # unsharded call): its reference is traced with the mesh's axes Manual, so that
            # Explicit axes of the ambient mesh add no sharding annotation the partitioner,
            # which has already run, would leave behind.
            abstract = jax.sharding.get_abstract_mesh()
            if abstract.empty or all(t == AxisType.Manual for t in abstract.axis_types):
                return spec.reference(params, *args)
            manual = abstract.update_axis_types({a: AxisType.Manual for a in abstract.axis_names})
            with jax.sharding.use_abstract_mesh(manual):
                return spec.reference(params, *args)

        reference_rule = mlir.lower_fun(reference, multiple_results=True)

        def default_rule(ctx, *args, params):
            if params.impl == "ffi":
                platforms = ", ".join(ctx.module_context.platforms)
                raise RuntimeError(
                    f"eqx_quant: impl='ffi' was requested for {spec.name!r} on platform "
                    f"{platforms!r}, but eqx_quant has kernels only for CPU and CUDA. Pass "
                    "impl='reference' (or impl='auto') to use the pure-JAX implementation."
                )
            return reference_rule(ctx, *args, params=params)

        mlir.register_lowering(self.inner, default_rule)
        for platform in ("cpu", "cuda"):
            mlir.register_lowering(
                self.inner, self._platform_rule(platform, reference_rule), platform=platform
            )

    def _platform_rule(self, platform: str, reference_rule):
        spec = self.spec
        target = f"eqx_quant_{spec.name}_{platform}"

        def rule(ctx, *args, params):
            if (
                params.impl == "ffi"
                and platform not in spec.kernel_platforms
                and spec.ffi_off_kernel_platforms == "error"
            ):
                raise RuntimeError(
                    f"eqx_quant: impl='ffi' was requested for {spec.name!r} on {platform}, "
                    f"where it has no compiled kernel yet (kernels: "
                    f"{', '.join(spec.kernel_platforms)}). Pass impl='auto' or "
                    "impl='reference' to run its pure-JAX implementation there."
                )
            if params.impl == "reference" or platform not in spec.kernel_platforms:
                return reference_rule(ctx, *args, params=params)
            _ffi.require_kernels(platform, spec.name)
            lowering = jax.ffi.ffi_lowering(target)
            return lowering(ctx, *args, **params.ffi_attrs())

        return rule

    # ---- outer: batching + custom_partitioning ----------------------------------------------
    def _register_outer(self) -> None:
        spec = self.spec
        inner_bind = self.bind_inner

        def body(params, *args):
            if spec.unsharded is None:
                return tuple(inner_bind(*args, params=params))
            return tuple(spec.unsharded(params, inner_bind, *args))

        partitioned = custom_partitioning(body, static_argnums=(0,))

        def partition(params, mesh, arg_infos, result_infos):
            local_fn, result_specs, arg_specs = spec.partition(
                params, mesh, arg_infos, result_infos
            )
            named = functools.partial(jax.sharding.NamedSharding, mesh)
            return (
                mesh,
                _traced_as_manual(mesh, functools.partial(local_fn, inner_bind)),
                tuple(named(s) for s in result_specs),
                tuple(named(s) for s in arg_specs),
            )

        def infer(params, mesh, arg_infos, result_infos):
            _, result_specs, _ = spec.partition(params, mesh, arg_infos, result_infos)
            return tuple(jax.sharding.NamedSharding(mesh, s) for s in result_specs)

        partitioned.def_partition(
            partition=partition,
            infer_sharding_from_operands=infer,
            sharding_rule=spec.sharding_rule,
        )

        def lower(*args, params):
            return partitioned(params, *args)

        mlir.register_lowering(self.outer, mlir.lower_fun(lower, multiple_results=True))
        _dispatch.prim_requires_devices_during_lowering.add(self.outer)

        def batch_rule(prim, args, dims, *, params):
            new_params, new_args, out_dims = spec.batch(params, args, dims)
            outs = prim.bind(*new_args, params=new_params)
            if spec.batch_outputs is not None:
                outs = spec.batch_outputs(params, args, dims, outs)
            return outs, out_dims

        # The inner primitive batches the same way: an op whose reference composes another
        # op's inner primitive (on one device's values) vmaps it over examples.
        for prim in (self.outer, self.inner):
            batching.primitive_batchers[prim] = functools.partial(batch_rule, prim)
