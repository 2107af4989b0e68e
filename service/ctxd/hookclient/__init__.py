"""What runs inside the agent's process: the hook command (__main__.py, run by its path, and
hook.py; `ctxd hook <harness>` runs the same), the harnesses as it reads them (harnesses.py),
the CTXD_* it reads (env.py, the CLI's too), its one HTTP request (request.py), its JSON
(jsontext.py) and the service it may start (autostart.py). Standard library only, and nothing
of the server: no module of ctxd's outside this package but `ctxd` itself."""
