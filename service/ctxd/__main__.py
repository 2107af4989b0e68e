"""`python -m ctxd` runs the ctxd command line."""

from ctxd.cli.main import main

raise SystemExit(main())
