"""Tests of command watches: the allowlist (403 over the API), timeouts, bounds, redaction."""

import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest
from ctxd.collectors import CollectContext, commands
from ctxd.errors import Refused
from ctxd.models import CommandsSection, CommandWatch, Watch
from ctxd.settings import Limits, Settings

from tests.conftest import Server, start_server, stop_server

SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
PRINTS_SECRET = [sys.executable, "-c", f"print('ready'); print('GITHUB_TOKEN={SECRET}')"]
# Shells, not Pythons: they print within milliseconds, well inside the 1 s cut-off, even on a
# loaded machine where a Python start-up alone can take longer.
HANGS = ["sh", "-c", "echo started; exec sleep 600"]
# A child that leaves a grandchild holding the pipe: the whole group must go.
FORKS = ["sh", "-c", "sleep 600 & echo $!; sleep 600"]
CHATTY = [sys.executable, "-c", "import sys; sys.stdout.write('x' * 10_000_000)"]
ALLOWED = {"secret": PRINTS_SECRET, "hang": HANGS, "forks": FORKS, "chatty": CHATTY}


def make_watch(watch_id: int = 1, **fields) -> Watch:
    spec = CommandWatch(**fields)
    return Watch(id=watch_id, session="s", created_at=datetime.now(UTC), spec=spec)


def collect(*watches: Watch, limits: Limits | None = None) -> CommandsSection:
    settings = Settings(commands=ALLOWED, limits=limits or Limits())
    return commands.collect(list(watches), CollectContext(settings=settings))


def test_resolve_by_name_or_exact_argv_only() -> None:
    settings = Settings(commands={"smi": ["nvidia-smi"]})
    assert commands.resolve(CommandWatch(name="smi"), settings) == ("smi", ["nvidia-smi"])
    assert commands.resolve(CommandWatch(argv=["nvidia-smi"]), settings) == ("smi", ["nvidia-smi"])
    for spec in (
        CommandWatch(name="rm"),
        CommandWatch(argv=["nvidia-smi", "-r"]),
        CommandWatch(argv=["sh", "-c", "nvidia-smi"]),
    ):
        with pytest.raises(Refused):
            commands.resolve(spec, settings)


def test_output_is_captured_and_redacted() -> None:
    section = collect(make_watch(name="secret"))
    [item] = section.items
    assert item.exit_code == 0 and item.timed_out is False and item.label == "secret"
    assert item.output == ["ready", "GITHUB_TOKEN=[REDACTED]"]
    assert SECRET not in json.dumps(section.model_dump(mode="json"))


def test_a_hanging_command_is_cut_off_with_its_children() -> None:
    section = collect(
        make_watch(1, name="hang", timeout_s=1), make_watch(2, name="forks", timeout_s=1)
    )
    by_id = {item.watch_id: item for item in section.items}
    assert by_id[1].timed_out is True and by_id[1].exit_code is None
    assert by_id[1].output == ["started"]
    grandchild = int(by_id[2].output[0])
    assert by_id[2].timed_out is True
    try:
        proc = psutil.Process(grandchild)
        proc.wait(timeout=10)  # killed with its group; reaped by init
    except psutil.NoSuchProcess:
        pass
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == "zombie"


def test_output_is_bounded() -> None:
    # timeout_s=2: a cut command is left blocked on its pipe until the timeout (see below).
    watch = make_watch(name="chatty", timeout_s=2)
    [item] = collect(watch, limits=Limits(command_output_chars_max=1000)).items
    assert item.output_cut is True
    assert sum(len(line) for line in item.output) <= 1000 + len(" … [cut 99999 chars]")


def test_missing_executable_and_removed_entry_are_unavailable() -> None:
    settings = Settings(commands={"ghost": ["no-such-binary-ctxd-test"]})
    ctx = CollectContext(settings=settings)
    section = commands.collect([make_watch(1, name="ghost"), make_watch(2, name="hang")], ctx)
    reasons = {u.watch_id: u.reason for u in section.unavailable}
    assert reasons[1] == "not found: no-such-binary-ctxd-test"
    assert "not in the server's allowlist" in reasons[2]


# --- over the API, against a real server configured with its own allowlist -------------------


@pytest.fixture
def allowlisted_server(tmp_path: Path) -> Iterator[Server]:
    env = {"CTXD_COMMANDS": json.dumps({"secret": PRINTS_SECRET, "hang": HANGS})}
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        yield srv
    finally:
        stop_server(srv)


def test_api_refuses_commands_not_in_the_configuration(allowlisted_server: Server) -> None:
    with allowlisted_server.client() as client:
        assert client.put("/api/sessions/cmd", json={"title": "t"}).status_code == 201
        url = "/api/sessions/cmd/watches"
        for spec in (
            {"kind": "command", "argv": ["rm", "-rf", "/tmp/nothing"]},
            {"kind": "command", "argv": ["sh", "-c", "echo hi"]},
            {"kind": "command", "name": "not-configured"},
        ):
            refused = client.post(url, json=spec)
            assert refused.status_code == 403, refused.text
            assert "allowlist" in refused.json()["detail"]
        assert client.get(url).json() == []
        ok = client.post(url, json={"kind": "command", "argv": PRINTS_SECRET})
        assert ok.status_code == 201, ok.text
        hang = client.post(url, json={"kind": "command", "name": "hang", "timeout_s": 1})
        assert hang.status_code == 201, hang.text
        snap = client.post("/api/sessions/cmd/snapshots", timeout=60)
        assert snap.status_code == 201, snap.text
        items = {i["label"]: i for i in snap.json()["observations"]["commands"]["items"]}
        assert items["secret"]["output"] == ["ready", "GITHUB_TOKEN=[REDACTED]"]
        assert items["hang"]["timed_out"] is True
        markdown = client.get("/api/sessions/cmd/snapshots/1/markdown").text
        assert "## Commands" in markdown and "cut off after" in markdown
        assert SECRET not in markdown and SECRET not in snap.text
    assert SECRET not in allowlisted_server.log()


def test_child_processes_are_not_left_behind() -> None:
    before = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    collect(make_watch(name="hang", timeout_s=0.5))
    after = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    assert after <= before


def test_a_cut_command_is_stopped_at_the_cut_not_at_the_timeout() -> None:
    watch = make_watch(name="chatty", timeout_s=2)
    [item] = collect(watch, limits=Limits(command_output_chars_max=1000)).items
    assert item.output_cut is True
    assert item.timed_out is False, "it was cut, not slow"
