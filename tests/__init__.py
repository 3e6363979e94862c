"""eqx_quant's test suite (a package, so that `tests.support` and `tests.oracle` import the same
way from every folder; pytest's `pythonpath = ["."]` puts the repository root on sys.path)."""
