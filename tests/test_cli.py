"""The ctxd CLI against a real server, and its answer when no server runs."""

import subprocess
import sys
import time

from tests.conftest import Server, free_port


def ctxd(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "service", "--url", url, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_cli_drives_a_session_end_to_end(server: Server, tmp_path):
    log = tmp_path / "app.log"
    log.write_text("starting\nready on :8000\n")
    assert ctxd(server.url, "session", "cli-run", "--objective", "ship it").returncode == 0
    assert ctxd(server.url, "watch", "cli-run", "log", str(log), "--lines", "5").returncode == 0
    note = ctxd(server.url, "note", "cli-run", "attempt", "first try", "--status", "failed")
    assert note.returncode == 0, note.stderr
    snap = ctxd(server.url, "snapshot", "cli-run")
    assert snap.returncode == 0 and snap.stdout.strip().startswith("cli-run v1")
    dump = ctxd(server.url, "resume", "cli-run", "--stored")
    assert (
        "ship it" in dump.stdout and "ready on :8000" in dump.stdout and "first try" in dump.stdout
    )


def test_cli_errors_are_one_line_with_what_to_do(server: Server):
    missing = ctxd(server.url, "snapshot", "no-such-session")
    assert missing.returncode == 1
    assert "404" in missing.stderr and "no-such-session" in missing.stderr
    bad = ctxd(server.url, "note", "no-such-session", "gossip", "x")
    assert bad.returncode == 1 and "400" in bad.stderr


def test_cli_without_a_service_says_how_to_start_one():
    started = time.monotonic()
    down = ctxd(f"http://127.0.0.1:{free_port()}", "resume", "anything")
    assert down.returncode == 1
    assert "cannot reach the service" in down.stderr and "ctxd serve" in down.stderr
    assert "Traceback" not in down.stderr
    assert time.monotonic() - started < 30
