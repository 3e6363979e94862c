"""MXFP8 and NVFP4 (block scaling): the pure-JAX reference and the public API against the
oracle, dbias, transforms and errors."""
