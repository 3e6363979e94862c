"""Grouped (MoE) quantization: numerics against the oracle, transforms, errors."""
