"""Layers on quantized GEMMs.

- The functions: TE's linear layer (`dense`) and its MoE form (`grouped_dense`), with the
  quantizers of their three GEMM operands (`DenseQuantizers`).
- The Equinox layers: `Linear` (a drop-in for `eqx.nn.Linear`), `GroupedLinear` (MoE
  experts) and `MLP`, each quantizing as its recipe says (`DelayedScaling`,
  `CurrentScaling`, `MXFP8BlockScaling`, `NVFP4BlockScaling`, `Float8BlockScaling`);
  `quantize_model` converts the `eqx.nn.Linear` layers of any model (and wraps an
  `eqx.nn.MultiheadAttention` whose projections round stochastically in
  `MultiheadAttention`, which passes them its key).
- The training step: `value_and_grad` (loss, parameter gradients and the model with its next
  delayed-scaling state), `accumulate` (the same over microbatches), `partition`, and
  `stats` (per layer and operand: scale, amax, saturated and flushed fractions).
"""

from ._attention import MultiheadAttention as MultiheadAttention
from ._convert import MLP as MLP
from ._convert import quantize_model as quantize_model
from ._dense import DenseQuantizers as DenseQuantizers
from ._dense import dense as dense
from ._grouped_dense import grouped_dense as grouped_dense
from ._grouped_linear import GroupedLinear as GroupedLinear
from ._layer import AbstractQuantizedLayer as AbstractQuantizedLayer
from ._linear import Linear as Linear
from ._recipes import AbstractRecipe as AbstractRecipe
from ._recipes import CurrentScaling as CurrentScaling
from ._recipes import DelayedScaling as DelayedScaling
from ._recipes import Float8BlockScaling as Float8BlockScaling
from ._recipes import MXFP8BlockScaling as MXFP8BlockScaling
from ._recipes import NVFP4BlockScaling as NVFP4BlockScaling
from ._state import DelayedState as DelayedState
from ._state import ScalingState as ScalingState
from ._stats import stats as stats
from ._train import accumulate as accumulate
from ._train import partition as partition
from ._train import value_and_grad as value_and_grad
