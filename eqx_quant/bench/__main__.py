"""`python -m eqx_quant.bench`: see the package docstring."""

from ._cli import main

raise SystemExit(main())
