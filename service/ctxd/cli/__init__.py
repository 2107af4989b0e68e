"""The `ctxd` command line: serve, thin calls to a running ctxd, setup and doctor."""

import sys

# httpx imports its own command line (rich, pygments, click: some 50 ms) unless that import
# fails; ctxd never uses it, and the CLI would pay for it on every call
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
