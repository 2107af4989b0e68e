"""The hook command an install writes: `python3 -S -I …/ctxd/hookclient/__main__.py hook
HARNESS` (and `--url`, `--token-file`, `--wake`), run by the harness on every event. Run by
its path, with no site and no environment, it puts the folder holding `ctxd` on the import
path itself and imports only the hook client (`hook.py`): this file stays small, as a script
is compiled on every run and a module is not."""

import sys

if not __package__:  # run by its path: `ctxd` is three folders up
    sys.path.insert(0, __file__.rsplit("/", 3)[0])

from ctxd.hookclient.hook import main

sys.exit(main(sys.argv[1:]))
