"""Delayed scaling for grouped (MoE) inputs: one scale and one amax history per group."""

from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped

from .._core import QuantizeLayout, ScalingMode, validated_by
from ._base import AbstractTensorScaleQuantizer, check_fp8_dtype, check_layout, dtype_name
from ._delayed import DelayedScaleQuantizer


def _check_grouped_delayed_args(
    num_groups, q_dtype, q_layout, amax_history_len, margin, amax_compute_algo, scale, amax_history
):
    name = "GroupedDelayedScaleQuantizer"
    if not isinstance(num_groups, int) or isinstance(num_groups, bool) or num_groups < 1:
        raise ValueError(f"{name}: num_groups must be an int >= 1, got {num_groups!r}.")
    if scale is not None and (not isinstance(scale, jax.Array) or scale.shape != (num_groups,)):
        got = getattr(scale, "shape", type(scale).__name__)
        raise ValueError(
            f"{name}: scale must be a float32 array of shape (num_groups,) = ({num_groups},), "
            f"got {got}."
        )
    if amax_history is not None and (
        not isinstance(amax_history, jax.Array)
        or amax_history.ndim != 2
        or amax_history.shape[0] != num_groups
    ):
        got = getattr(amax_history, "shape", type(amax_history).__name__)
        raise ValueError(
            f"{name}: amax_history must be a float32 array of shape (num_groups, history) with "
            f"num_groups={num_groups}, got {got}."
        )
    # Everything else is checked exactly as for one group.
    DelayedScaleQuantizer(
        q_dtype,
        q_layout,
        amax_history_len,
        margin,
        amax_compute_algo,
        None if scale is None else scale[:1],
        None if amax_history is None else amax_history[0],
    )


class GroupedDelayedScaleQuantizer(AbstractTensorScaleQuantizer):
    """Delayed FP8 scaling for `grouped_quantize`: group `g` has its own `scale[g]` and
    `amax_history[g]`, and is quantized exactly as `DelayedScaleQuantizer` `group(g)` would.

    ```python
    gq = eqq.GroupedDelayedScaleQuantizer(num_groups=8)
    gt = eqq.grouped_quantize(x, group_sizes, gq)
    gq = gq.update(gt.amax)            # one new history entry per group
    ```

    **Arguments:** `num_groups`, then those of `DelayedScaleQuantizer`, with `scale` of shape
    `(num_groups,)` and `amax_history` of shape `(num_groups, amax_history_len)`.
    """

    scale: Float[Array, " G"]
    amax_history: Float[Array, "G history"]
    q_dtype: str = eqx.field(static=True)
    q_layout: QuantizeLayout = eqx.field(static=True)
    margin: float = eqx.field(static=True)
    amax_compute_algo: Literal["max", "most_recent"] = eqx.field(static=True)
    scaling_mode: ClassVar[ScalingMode] = ScalingMode.DELAYED_TENSOR_SCALING

    @validated_by(lambda self, **kw: _check_grouped_delayed_args(**kw))
    @jaxtyped(typechecker=beartype)
    def __init__(
        self,
        num_groups: int,
        q_dtype=jnp.float8_e4m3fn,
        q_layout: QuantizeLayout = QuantizeLayout.ROWWISE_COLWISE,
        amax_history_len: int | None = None,
        margin: float | int = 0.0,
        amax_compute_algo: Literal["max", "most_recent"] = "max",
        scale: Float[Array, " G"] | None = None,
        amax_history: Float[Array, "G history"] | None = None,
    ):
        self.q_dtype = dtype_name(q_dtype)
        self.q_layout = q_layout
        self.margin = float(margin)
        self.amax_compute_algo = amax_compute_algo
        self.scale = jnp.ones((num_groups,), jnp.float32) if scale is None else scale
        if amax_history is None:
            amax_history = jnp.zeros((num_groups, amax_history_len or 1024), jnp.float32)
        self.amax_history = amax_history

    def __check_init__(self):
        check_fp8_dtype("GroupedDelayedScaleQuantizer", self.q_dtype)
        check_layout("GroupedDelayedScaleQuantizer", self.q_layout)

    @property
    def num_groups(self) -> int:
        return self.scale.shape[-1]

    @property
    def amax_history_len(self) -> int:
        """The length L of each group's amax history."""
        return self.amax_history.shape[-1]

    @property
    def needs_amax_first(self) -> bool:
        return False

    def scale_for(self, x_amax) -> Float[Array, " G"]:
        del x_amax
        return self.scale

    def group(self, g: int) -> DelayedScaleQuantizer:
        """Group `g`'s state as a plain `DelayedScaleQuantizer`."""
        groups = self.num_groups
        if not isinstance(g, int) or isinstance(g, bool) or not 0 <= g < groups:
            raise ValueError(
                f"GroupedDelayedScaleQuantizer.group: g must be an int in [0, {groups}), got {g!r}."
            )
        return DelayedScaleQuantizer(
            self.q_dtype,
            self.q_layout,
            margin=self.margin,
            amax_compute_algo=self.amax_compute_algo,
            scale=self.scale[g : g + 1],
            amax_history=self.amax_history[g],
        )

    @jaxtyped(typechecker=beartype)
    def update(self, amax: Float[Array, " G"]) -> "GroupedDelayedScaleQuantizer":
        """Fold each group's new amax into its history (the rule of
        `DelayedScaleQuantizer.update`, per group); returns a new quantizer."""
        if amax.shape != self.scale.shape:
            raise ValueError(
                f"GroupedDelayedScaleQuantizer.update: amax must have shape {self.scale.shape} "
                f"(one per group), got {amax.shape}. Pass the grouped tensor's .amax."
            )

        def one(scale, history, a):
            q = DelayedScaleQuantizer(
                self.q_dtype,
                self.q_layout,
                margin=self.margin,
                amax_compute_algo=self.amax_compute_algo,
                scale=scale.reshape(1),
                amax_history=history,
            ).update(a.reshape(1))
            return q.scale[0], q.amax_history

        scale, history = jax.vmap(one)(self.scale, self.amax_history, amax)
        return eqx.tree_at(lambda q: (q.scale, q.amax_history), self, (scale, history))
