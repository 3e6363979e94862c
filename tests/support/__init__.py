"""Shared pieces of the tests (no tests here):

- `paths`: the repository root and what tests read there (`REPO`, `EXAMPLES`, `CSRC`, `README`);
- `dtypes`: the one table of input and FP8 dtypes (`X_DTYPES`, `Q_DTYPES`, ...);
- `bytes`: the one byte view (`u8`) and the bit-exact comparisons built on it;
- `kernels`: eqx_quant's compiled kernels, reached through its own loader
  (`eqx_quant._ops._ffi`): which ops are built, FFI target names, implementations to test;
- `cuda`: the GPU tests' device, the `requires_cuda` marker and their comparison machinery;
- `cases`: shapes, layouts and inputs shared by the FP8 and block-format tests;
- `gemm`: the GEMM tests' oracle products and tolerances;
- `grouped`: the grouped (MoE) numerics tests' cases and full-buffer comparison;
- `block_reference`: the block-reference tests' jitted-core callbacks;
- `nvfp4_kernel`: calls of the NVFP4 CPU kernels and their expected bytes.
"""
