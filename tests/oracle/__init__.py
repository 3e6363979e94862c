"""The independent NumPy + ml_dtypes oracle, written from the format specifications and
docs/, sharing no code with eqx_quant:

- `fp8`: per-tensor FP8 scaling (current / delayed), dequantization, the dbias tree sum;
- `blocks`: MXFP8, NVFP4 (1D, 2D, RHT) on 2-D views, and the cuBLAS 128x4 scale swizzle;
- `sr`: the counter-based stochastic rounding (Threefry-2x32-20, random bytes, SR indices);
- `nd`: MXFP8 / NVFP4 of N-d tensors (the `(A, K, C, L)` view) on `blocks` and `sr`;
- `grouped`: grouped (MoE) quantization assembled from the dense oracles.

Its own tests (`test_oracle_*.py`) check it against hand-computed values, and the library's
SR and N-d block references against it.
"""
