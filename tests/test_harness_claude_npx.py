"""A newcomer's own small project under the real Claude Code, started the way a newcomer starts
it: `npx claude -p "…"` in the project's folder, ctxd installed with one command, nothing
registered by hand.

npx leaves `npm exec claude -p <the prompt>` running above the harness, in the project's
folder, for as long as the harness runs: ctxd must not take it for the agent's work (an
attempt that "ended after 6 s", its shells and `sleep` "crashed" with the app's error), nor its
`-p` for a password (the user's objective shown as "[REDACTED]"). The app, launched as it is,
dies at once: the project's config.ini sets 0 workers, which it refuses; the agent reads why,
and its relaunch with `--workers 2` exports APP_DEBUG=1 before `nohup` and serves; the user
then asks to keep APP_DEBUG=1, and comes back with "continue".
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Server, free_port
from tests.scripted_model import ScriptedModel, Step
from tests.test_harness_claude import CLAUDE, checkout, claude_env

HARNESS = CLAUDE.parents[2]  # the npm prefix that holds Claude Code
NPX = shutil.which("npx")
ASK = "Get the shop app serving on a port and find out why it crashes at start."
LATER = "Keep APP_DEBUG=1 on whatever you run next."
# last week's change: the number of workers moved into the config, and 0 was committed
WHY = (
    "It crashed at start because config.ini sets workers = 0 and app.py refuses 0 workers."
    " Relaunched with --workers 2 and APP_DEBUG=1: it serves and answers ok."
)
CONFIG = "[server]\n# threads that answer requests\nworkers = 0\n"
APP = '''\
"""The shop's web app: it serves on --port with --workers threads (config.ini's by default),
and refuses 0 workers."""
import argparse, configparser, datetime, http.server, os, queue, socketserver, threading

config = configparser.ConfigParser()
config.read("config.ini")
parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int)
parser.add_argument("--workers", type=int, default=config.getint("server", "workers"))
args = parser.parse_args()

def log(text):
    print(f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S} {text}", flush=True)

debug = os.environ.get("APP_DEBUG")
log(f"starting on port {args.port} with {args.workers} workers, debug={debug}")
if args.workers < 1:
    raise ValueError(f"workers must be at least 1, got {args.workers} (config.ini or --workers)")

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *_):
        log("GET " + self.path)

class Server(socketserver.TCPServer):
    """Each request handed to one of --workers threads, started up front."""
    def process_request(self, request, address):
        requests.put((request, address))

def work():
    while True:
        request, address = requests.get()
        server.finish_request(request, address)
        server.shutdown_request(request)

requests = queue.Queue()
server = Server(("127.0.0.1", args.port), Handler)
for _ in range(args.workers):
    threading.Thread(target=work, daemon=True).start()
log(f"serving with {args.workers} worker threads")
server.serve_forever()
'''


@pytest.fixture
def shop() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="work-")) / "shop"
    top.mkdir()
    (top / "app.py").write_text(APP)
    (top / "config.ini").write_text(CONFIG)
    with checkout(top, "the shop's app"):
        yield top
    shutil.rmtree(top.parent, ignore_errors=True)


def npx_claude(args: list[str], cwd: Path, home: Path, model: ScriptedModel) -> None:
    env = {**claude_env(home, model), "npm_config_offline": "true"}  # never the registry
    argv = [str(NPX), "--prefix", str(HARNESS), "claude", *args, "--dangerously-skip-permissions"]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.skipif(
    not CLAUDE.exists() or NPX is None, reason="Claude Code or npx not installed (`make test`)"
)
def test_a_newcomers_app_under_npx_claude_reads_true(server: Server, shop: Path, tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", server.url, "install", "claude"],
        capture_output=True, text=True, check=True, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    port = free_port()
    launch = f"nohup python3 app.py --port {port}{{}} > {{}} 2>&1 &"
    model = ScriptedModel(
        [
            Step(bash=launch.format("", "app1.log")),  # as it is
            # long enough for ctxd to scan the folder while `npm exec claude` runs above
            Step(bash="sleep 6; tail -3 app1.log"),
            Step(bash="grep -n workers config.ini"),
            Step(bash="export APP_DEBUG=1; " + launch.format(" --workers 2", "app2.log")),
            Step(bash=f"sleep 2; curl -s 127.0.0.1:{port}/"),
            Step(text=WHY),
            Step(
                text="I will keep APP_DEBUG=1 on every run. Next I set workers = 2 in"
                " config.ini, so the app starts as it is, and relaunch it that way."
            ),
            Step(text="Picking up where we were."),
        ]
    )
    try:
        npx_claude(["-p", ASK], shop, home, model)
        npx_claude(["--continue", "-p", LATER], shop, home, model)
        time.sleep(3)
        npx_claude(["--continue", "-p", "continue"], shop, home, model)
    finally:
        model.close()
    context = model.context_of_last_turn()
    (Path(__file__).parent / "artifacts").mkdir(exist_ok=True)
    (Path(__file__).parent / "artifacts" / "harness_claude_npx_continue.txt").write_text(context)

    # the user's words as they typed them: `-p` before a harness's prompt is no password
    assert "**Objective** (the user's first prompt" in context and ASK in context, context
    assert LATER in context and "[REDACTED]" not in context
    # two attempts, both the app's; npx, Claude Code and its shells are none of them
    attempts = context[context.index("## Attempts") : context.index("## Recent commands")]
    assert re.findall(r"\*\*attempt (\d+)\*\*", attempts) == ["1", "2"], attempts
    assert "claude" not in attempts and "npm" not in context.split("## Processes")[1]
    assert "crashed" not in context and "**critical**" not in context, context
    assert "ValueError: workers must be at least 1, got 0 (config.ini or --workers)" in attempts
    assert "--workers 2 added; env APP_DEBUG=1 added" in attempts, attempts
    # the variable the relaunch exported, read from the running app's own environment
    running = context[context.index("## Processes") : context.index("## Ports")]
    assert "Environment:" in running and "APP_DEBUG=1" in running, running
    assert "| 3 |" in running  # its main thread and its two workers
    # what the agent read of the config, then what the server answered its own request, as
    # the harness reported them
    config = context.index("What `grep -n workers config.ini` showed you at ")
    assert "3:workers = 0" in context[config:], context
    assert f"What `sleep 2; curl -s 127.0.0.1:{port}/` showed you at " in context[config:]
