"""Recipes: which quantizer each GEMM operand of a layer gets (TE's `common/recipe`).

A recipe is an immutable module with static fields only: it holds no arrays and no state. It
builds the quantizers of one layer's three GEMM operands (`x`, `kernel`, `grad`), and for
delayed scaling the layer's initial state and the rule that advances it.
"""

import abc
import itertools
import math
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp

from .._quantizer import (
    AbstractQuantizer,
    BlockScaleQuantizer,
    CurrentScaleQuantizer,
    DelayedScaleQuantizer,
    Float8BlockQuantizer,
    GroupedDelayedScaleQuantizer,
    NVFP4Quantizer,
)
from ._dense import DenseQuantizers
from ._state import DelayedState, ScalingState

Fp8Format = Literal["hybrid", "e4m3"]
_ROLES = ("x", "kernel", "grad")


def _check_format(cls: str, fp8_format) -> None:
    if fp8_format not in ("hybrid", "e4m3"):
        raise ValueError(
            f"{cls}: fp8_format must be 'hybrid' (E4M3 forward, E5M2 gradients) or 'e4m3', got "
            f"{fp8_format!r}."
        )


def _fp8_dtype(fp8_format: str, role: str):
    return jnp.float8_e5m2 if fp8_format == "hybrid" and role == "grad" else jnp.float8_e4m3fn


class AbstractRecipe(eqx.Module):
    """How one layer quantizes its GEMM operands. Final subclasses: `DelayedScaling`,
    `CurrentScaling`, `MXFP8BlockScaling`, `NVFP4BlockScaling`, `Float8BlockScaling`."""

    @abc.abstractmethod
    def quantizer(self, role: str) -> AbstractQuantizer:
        """The quantizer of one operand (`"x"`, `"kernel"` or `"grad"`) of a dense layer."""

    def init_state(self, num_groups: int | None = None) -> ScalingState | None:
        """A new layer's scaling state (None: the recipe keeps none)."""
        del num_groups
        return None

    def dense_quantizers(self, state: ScalingState | None) -> DenseQuantizers:
        """The quantizers of a dense layer, with `state` in place."""
        del state
        return DenseQuantizers(*(self.quantizer(r) for r in _ROLES))

    def grouped_quantizers(self, state: ScalingState | None, num_groups: int) -> DenseQuantizers:
        """The quantizers of a grouped (MoE) layer of `num_groups` experts, `state` in place."""
        del state, num_groups
        return self.dense_quantizers(None)

    def advance(self, state: ScalingState | None, observed) -> ScalingState | None:
        """The next state, given the observed `[amax, calls]` of each operand."""
        return self.advance_all([state], [observed])[0]

    def advance_all(self, states: list, observed: list) -> list:
        """`advance` for many layers with this recipe at once (same order)."""
        del observed
        return list(states)


class DelayedScaling(AbstractRecipe):
    """Per-tensor FP8 with the scale from a history of past amaxes (TE's `DelayedScaling`).

    **Arguments:**

    - `fp8_format`: `"hybrid"` (default: E4M3 for x and the kernel, E5M2 for gradients) or
      `"e4m3"` (E4M3 everywhere).
    - `amax_history_len`: the length of each operand's amax history (default 1024).
    - `amax_compute_algo`: `"max"` (default) or `"most_recent"`.
    - `margin`: the scale is `(fp8_max / amax) / 2^margin`; a float >= 0 (default 0).

    The state (a scale and an amax history per operand) lives in the layer, stored so that
    optimizers, gradient filters and dtype casts pass it by; `eqx_quant.nn.value_and_grad`
    returns the model with its next state.
    """

    fp8_format: Fp8Format = eqx.field(static=True, default="hybrid")
    amax_history_len: int = eqx.field(static=True, default=1024)
    amax_compute_algo: Literal["max", "most_recent"] = eqx.field(static=True, default="max")
    margin: float = eqx.field(static=True, default=0.0)

    def __check_init__(self):
        _check_format("DelayedScaling", self.fp8_format)
        n = self.amax_history_len
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"DelayedScaling: amax_history_len must be an int >= 1, got {n!r}.")
        if self.amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(
                "DelayedScaling: amax_compute_algo must be 'max' or 'most_recent', got "
                f"{self.amax_compute_algo!r}."
            )
        m = self.margin
        if not isinstance(m, int | float) or isinstance(m, bool) or not math.isfinite(m) or m < 0:
            raise ValueError(
                f"DelayedScaling: margin must be a finite number >= 0 (the scale is divided by "
                f"2^margin), got {m!r}."
            )

    def _one(self, role: str, scale=None, history=None) -> DelayedScaleQuantizer:
        return DelayedScaleQuantizer(
            _fp8_dtype(self.fp8_format, role),
            amax_history_len=self.amax_history_len,
            margin=self.margin,
            amax_compute_algo=self.amax_compute_algo,
            scale=scale,
            amax_history=history,
        )

    def quantizer(self, role: str) -> AbstractQuantizer:
        return self._one(role)

    def init_state(self, num_groups: int | None = None) -> ScalingState:
        lead = () if num_groups is None else (num_groups,)
        one = lambda: DelayedState.from_values(  # noqa: E731
            jnp.ones(lead + (1,), jnp.float32),
            jnp.zeros(lead + (self.amax_history_len,), jnp.float32),
        )
        return ScalingState(one(), one(), one())

    def dense_quantizers(self, state: ScalingState | None) -> DenseQuantizers:
        if state is None:
            raise ValueError("DelayedScaling needs the layer's state to build its quantizers.")

        def one(role):
            s = getattr(state, role)
            return self._one(role, s.scale_value(), s.history_value())

        return DenseQuantizers(*(one(r) for r in _ROLES))

    def grouped_quantizers(self, state: ScalingState | None, num_groups: int) -> DenseQuantizers:
        if state is None:
            raise ValueError("DelayedScaling needs the layer's state to build its quantizers.")

        def grouped(role):
            s = getattr(state, role)
            return GroupedDelayedScaleQuantizer(
                num_groups,
                _fp8_dtype(self.fp8_format, role),
                amax_history_len=self.amax_history_len,
                margin=self.margin,
                amax_compute_algo=self.amax_compute_algo,
                scale=s.scale_value()[..., 0],
                amax_history=s.history_value(),
            )

        k = state.kernel
        experts = jax.vmap(lambda sc, h: self._one("kernel", sc, h))(
            k.scale_value(), k.history_value()
        )
        return DenseQuantizers(grouped("x"), experts, grouped("grad"))

    def advance_all(self, states: list, observed: list) -> list:
        """Every layer's operands of one role advance in one batched update: the scales and
        histories of all of them are concatenated, updated together and split again, so that a
        step of a deep model runs a few kernels for its scaling state rather than a few per
        layer and operand."""
        out = {}
        for role in _ROLES:
            rows = [
                (i, getattr(s, role), getattr(o, role))
                for i, (s, o) in enumerate(zip(states, observed, strict=True))
                if s is not None and getattr(o, role) is not None
            ]
            if rows:
                new = self._advance_role(role, [s for _, s, _ in rows], [o for _, _, o in rows])
                out.update(((i, role), n) for (i, _, _), n in zip(rows, new, strict=True))
        return [
            None if s is None
            else ScalingState(*(out.get((i, r), getattr(s, r)) for r in _ROLES))
            for i, s in enumerate(states)
        ]

    def _advance_role(self, role: str, states: list, observed: list) -> list:
        """TE's rule once over the concatenated rows of `states` (one operand role)."""
        length = self.amax_history_len
        for s in states:
            if s.amax_history.shape[-1] != length:
                raise ValueError(
                    f"DelayedScaling: a layer's {role} amax history has length "
                    f"{s.amax_history.shape[-1]}, but the recipe's amax_history_len is "
                    f"{length}; build the layer's state with this recipe's init_state()."
                )
        scale = jnp.concatenate([s.scale_value().reshape(-1) for s in states])
        history = jnp.concatenate([s.history_value().reshape(-1, length) for s in states])
        obs = jnp.concatenate([o.reshape(-1, 2) for o in observed])

        def update(sc, h, ob):
            q = self._one(role, sc.reshape(1), h).update(ob[0].reshape(1))
            # A layer its loss never reached observed nothing: its state stays.
            keep = ob[1] == 0
            return jnp.where(keep, sc, q.scale[0]), jnp.where(keep, h, q.amax_history)

        new_scale, new_history = jax.vmap(update)(scale, history, obs)
        leads = [s.amax_history.shape[:-1] for s in states]
        ends = list(itertools.accumulate(math.prod(lead) for lead in leads))[:-1]
        return [
            DelayedState.from_values(sc.reshape(lead + (1,)), h.reshape(lead + (length,)))
            for lead, sc, h in zip(
                leads, jnp.split(new_scale, ends), jnp.split(new_history, ends), strict=True
            )
        ]


class CurrentScaling(AbstractRecipe):
    """Per-tensor FP8 with the scale from each tensor's own amax (TE's
    `Float8CurrentScaling`). Stateless.

    **Arguments:**

    - `fp8_format`: `"hybrid"` (default: E5M2 gradients) or `"e4m3"`.
    """

    fp8_format: Fp8Format = eqx.field(static=True, default="hybrid")

    def __check_init__(self):
        _check_format("CurrentScaling", self.fp8_format)

    def quantizer(self, role: str) -> AbstractQuantizer:
        return CurrentScaleQuantizer(_fp8_dtype(self.fp8_format, role))


class MXFP8BlockScaling(AbstractRecipe):
    """MXFP8: E4M3 with one E8M0 scale per 32 elements, for every operand (TE's
    `MXFP8BlockScaling`). Stateless. On Hopper the GEMMs multiply the exact bfloat16 values."""

    def quantizer(self, role: str) -> AbstractQuantizer:
        del role
        return BlockScaleQuantizer()


class NVFP4BlockScaling(AbstractRecipe):
    """NVFP4 with TE's placement (`NVFP4BlockScaling`): 16x16 (2D) scales on the weights,
    the random Hadamard transform on the weight-gradient operands (x's and the gradient's
    colwise copies) and stochastic rounding on the gradient. Stateless; a layer then needs a
    `key` per step when `stochastic_rounding` is on.

    **Arguments:**

    - `rht`: the 16-point random Hadamard transform on x and the gradient (default True).
    - `stochastic_rounding`: round the gradient stochastically (default True).
    - `weight_2d`: one scale per 16x16 tile of the weights (default True).
    """

    rht: bool = eqx.field(static=True, default=True)
    stochastic_rounding: bool = eqx.field(static=True, default=True)
    weight_2d: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        for name in ("rht", "stochastic_rounding", "weight_2d"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(
                    f"NVFP4BlockScaling: {name} must be a bool, got {getattr(self, name)!r}."
                )

    def quantizer(self, role: str) -> AbstractQuantizer:
        if role == "kernel":
            return NVFP4Quantizer(use_2d=self.weight_2d)
        sr = self.stochastic_rounding and role == "grad"
        return NVFP4Quantizer(use_rht=self.rht, stochastic_rounding=sr)

    def grouped_quantizers(self, state: ScalingState | None, num_groups: int) -> DenseQuantizers:
        # The grouped GEMMs take no Hadamard-transformed operands.
        del state, num_groups
        sr = self.stochastic_rounding
        return DenseQuantizers(
            NVFP4Quantizer(), NVFP4Quantizer(use_2d=self.weight_2d),
            NVFP4Quantizer(stochastic_rounding=sr),
        )


class Float8BlockScaling(AbstractRecipe):
    """FP8 with one float32 scale per 1x128 block of the activations and gradients and per
    128x128 tile of the weights (TE PyTorch's `Float8BlockScaling`, the DeepSeek-V3 recipe).
    Stateless. In `GroupedLinear` the tokens and gradients are quantized grouped (1x128
    blocks from each group's start) and each expert's weight on its own.

    **Arguments:**

    - `fp8_format`: `"e4m3"` (default, as TE: the blocks give the range E5M2 would) or
      `"hybrid"` (E5M2 gradients).
    - `power_2_scales`: round every scale down to a power of two (default True, as TE).
    - `weight_2d`: 128x128 tiles on the weights (default True); False gives them 1x128 blocks.
    """

    fp8_format: Fp8Format = eqx.field(static=True, default="e4m3")
    power_2_scales: bool = eqx.field(static=True, default=True)
    weight_2d: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        _check_format("Float8BlockScaling", self.fp8_format)
        for name in ("power_2_scales", "weight_2d"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(
                    f"Float8BlockScaling: {name} must be a bool, got {getattr(self, name)!r}."
                )

    def quantizer(self, role: str) -> AbstractQuantizer:
        block = "128x128" if role == "kernel" and self.weight_2d else "1x128"
        return Float8BlockQuantizer(
            q_dtype=_fp8_dtype(self.fp8_format, role), block=block,
            power_2_scales=self.power_2_scales,
        )
