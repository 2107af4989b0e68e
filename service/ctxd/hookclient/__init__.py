"""What runs inside the agent's process: `ctxd hook <harness>` (hook.py), its one HTTP request
(request.py) and the service it may start (autostart.py). Standard library only, and nothing
of the server: it imports the CLI's environment (`cli/env.py`) and the harness adapters."""
