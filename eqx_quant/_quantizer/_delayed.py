"""Delayed scaling: the scale comes from a history of past amaxes (TE's §1.3 rule)."""

from typing import ClassVar, Literal

import equinox as eqx
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped

from .. import reference
from .._enums import QuantizeLayout, ScalingMode
from ._base import AbstractTensorScaleQuantizer, check_fp8_dtype, check_layout, dtype_name


class DelayedScaleQuantizer(AbstractTensorScaleQuantizer):
    """Per-tensor FP8 quantization with a scale computed from previous steps' amaxes.

    `quantize` uses `scale` as it is and reports the amax it observed (`t.amax`); fold that
    amax into the state with `update`, which returns a NEW quantizer (nothing mutates):

    ```python
    t = eqq.quantize(x, q)
    q = q.update(t.amax)
    ```

    **Arguments:**

    - `q_dtype`: `jnp.float8_e4m3fn` (default) or `jnp.float8_e5m2`.
    - `q_layout`: an `eqx_quant.QuantizeLayout` (default `ROWWISE_COLWISE`).
    - `amax_history_len`: length L of the amax history (default 1024).
    - `margin`: the scale is `(fp8_max / amax) / 2^margin` (default 0).
    - `amax_compute_algo`: `"max"` (max over the history, default) or `"most_recent"`.
    - `scale`, `amax_history`: initial state (default: scale 1, zero history).
    """

    scale: Float[Array, "1"]
    amax_history: Float[Array, " history"]
    q_dtype: str = eqx.field(static=True)
    q_layout: QuantizeLayout = eqx.field(static=True)
    margin: float = eqx.field(static=True)
    amax_compute_algo: Literal["max", "most_recent"] = eqx.field(static=True)
    scaling_mode: ClassVar[ScalingMode] = ScalingMode.DELAYED_TENSOR_SCALING

    @jaxtyped(typechecker=beartype)
    def __init__(
        self,
        q_dtype=jnp.float8_e4m3fn,
        q_layout: QuantizeLayout = QuantizeLayout.ROWWISE_COLWISE,
        amax_history_len: int = 1024,
        margin: float = 0.0,
        amax_compute_algo: Literal["max", "most_recent"] = "max",
        scale: Float[Array, "1"] | None = None,
        amax_history: Float[Array, " history"] | None = None,
    ):
        if amax_history_len < 1:
            raise ValueError(
                f"DelayedScaleQuantizer: amax_history_len must be >= 1, got {amax_history_len}."
            )
        if not jnp.isfinite(margin):
            raise ValueError(f"DelayedScaleQuantizer: margin must be finite, got {margin}.")
        self.q_dtype = dtype_name(q_dtype)
        self.q_layout = q_layout
        self.margin = float(margin)
        self.amax_compute_algo = amax_compute_algo
        self.scale = jnp.ones((1,), jnp.float32) if scale is None else scale
        self.amax_history = (
            jnp.zeros((amax_history_len,), jnp.float32) if amax_history is None else amax_history
        )

    def __check_init__(self):
        check_fp8_dtype("DelayedScaleQuantizer", self.q_dtype)
        check_layout("DelayedScaleQuantizer", self.q_layout)

    @property
    def needs_amax_first(self) -> bool:
        return False

    def scale_for(self, x_amax: Float[Array, "1"] | None) -> Float[Array, "1"]:
        del x_amax
        return self.scale

    @jaxtyped(typechecker=beartype)
    def update(self, amax: Float[Array, "1"]) -> "DelayedScaleQuantizer":
        """Fold a new amax into the history and recompute the scale; returns a new quantizer.

        TE's order: `h[0] = amax`; `amax_for_scale = max(h)` (or `h[0]` for "most_recent");
        `scale = (fp8_max / amax_for_scale) / 2^margin`, keeping the previous scale when that
        amax is 0, NaN or Inf; then `h = roll(h, -1)` and `h[0] = 0`.

        Under `jax.lax.scan`, carry the quantizer and call `update` once per step; with gradient
        accumulation, combine the micro-steps' amaxes with `jnp.maximum` and update once, so no
        step's amax is lost.
        """
        history = self.amax_history.at[0].set(amax[0])
        chosen = (
            reference.max_propagate_nan(history) if self.amax_compute_algo == "max" else history[0]
        )
        scale = reference.compute_scale(chosen.reshape(1), self.q_dtype, self.margin, self.scale)
        history = jnp.roll(history, -1).at[0].set(0.0)
        return eqx.tree_at(lambda q: (q.scale, q.amax_history), self, (scale, history))
