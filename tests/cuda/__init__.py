"""The CUDA kernels against the CPU kernels / reference, byte for byte; GEMMs on the GPU; two
GPUs. Skipped without a GPU (a failure under EQX_QUANT_REQUIRE_CUDA=1)."""
