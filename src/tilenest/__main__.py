"""`python -m tilenest ...` is the `tilenest` command."""

from tilenest.cli import main

raise SystemExit(main())
