"""The compiled kernels called directly: the host C++ tests and the CPU FFI targets."""
