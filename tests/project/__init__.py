"""The project around the library: the examples, the README snippets and the benchmark CLI."""
