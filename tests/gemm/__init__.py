"""gemm, dense, grouped_gemm, grouped_wgrad and grouped_dense against float64 products of the
oracle's values."""
