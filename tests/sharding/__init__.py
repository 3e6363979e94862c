"""Sharded jit, shard_map and explicit mesh axes on 8 fake CPU devices."""
