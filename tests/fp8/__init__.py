"""Per-tensor FP8 scaling (current and delayed): numerics against the oracle, transforms,
errors."""
