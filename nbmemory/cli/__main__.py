"""``python -m nbmemory.cli``: the same as the ``nbmemory`` console script."""

from nbmemory.cli.main import main

raise SystemExit(main())
