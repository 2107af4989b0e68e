"""The `ctxd` command line: serve, thin calls to a running ctxd, setup and doctor."""
