"""Layers on quantized GEMMs: TE's linear layer (`dense`) and its MoE form
(`grouped_dense`), with the quantizers of their three GEMM operands (`DenseQuantizers`)."""

from ._dense import DenseQuantizers as DenseQuantizers
from ._dense import dense as dense
from ._grouped_dense import grouped_dense as grouped_dense
