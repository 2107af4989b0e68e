"""`python -m service` runs the ctxd command line."""

from service.cli import main

raise SystemExit(main())
