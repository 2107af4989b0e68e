"""The CLI as a person first meets it: help, tables and one-line reports, --json either side of
the command, `search` without a session, `--url host:port`, no duplicate watches, and errors in
the command line's words. In-process `main([...])` against a real server (one subprocess shows
the installed entry point does the same)."""

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest
from ctxd.cli.main import build_parser, commands_of, main

from tests.conftest import Server


class Ran(NamedTuple):
    code: int
    out: str
    err: str


Cli = Callable[..., Ran]


@pytest.fixture
def cli(server: Server, capsys: pytest.CaptureFixture[str]) -> Cli:
    """`ctxd --url URL ARGS…` in this process: its exit status, stdout and stderr."""
    return lambda *args, url=server.url: _run(capsys, "--url", url, *args)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> Ran:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own usage errors and --help
        code = int(exc.code or 0)
    said = capsys.readouterr()
    return Ran(code, said.out, said.err)


# --- help -----------------------------------------------------------------------------------


def test_bare_ctxd_and_ctxd_help_print_the_help(capsys: pytest.CaptureFixture[str]):
    bare = subprocess.run(
        [sys.executable, "-m", "ctxd"], capture_output=True, text=True, timeout=60
    )
    # like git and uv: the help on stdout, and a usage status, since nothing was done
    assert bare.returncode == 2 and "commands:" in bare.stdout and "--json" in bare.stdout
    assert "error" not in bare.stderr
    helped = _run(capsys, "help")
    assert helped.code == 0 and helped.out == bare.stdout
    one = _run(capsys, "help", "search")
    assert one.code == 0 and "[SESSION] QUERY" in one.out and "--limit" in one.out
    unknown = _run(capsys, "help", "nope")
    assert unknown.code == 2 and "no command 'nope'" in unknown.err


def test_the_json_convention_is_documented_once_in_the_epilog(capsys: pytest.CaptureFixture[str]):
    said = _run(capsys, "help").out
    epilog = said[said.index("output:") :]
    assert "`ctxd --json sessions`" in epilog and "`ctxd sessions --json`" in epilog
    assert "exit status:" in epilog and "3 no such session" in epilog


def test_every_option_and_argument_of_every_command_has_help():
    parser = build_parser()
    missing = []
    for name, command in [("ctxd", parser), *commands_of(parser).items()]:
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_every_command_but_serve_and_hook_takes_json_before_or_after_it():
    parser = build_parser()
    for name, command in commands_of(parser).items():
        if name not in ("help", "serve", "hook"):
            assert "--json" in command._option_string_actions, name
    assert parser.parse_args(["--json", "sessions"]).json is True
    assert parser.parse_args(["sessions", "--json"]).json is True
    assert parser.parse_args(["sessions"]).json is False


def test_the_lists_of_kinds_in_the_help_are_the_models():
    from typing import get_args

    from ctxd.cli.main import NOTE_KINDS, NOTE_STATUSES
    from ctxd.models.journal import STATUSES, JournalKind

    assert list(get_args(JournalKind)) == NOTE_KINDS
    assert {kind: list(said) for kind, said in STATUSES.items()} == NOTE_STATUSES


# --- tables for a person, JSON for a script ---------------------------------------------------


def test_listings_print_a_table_and_json_either_side(cli: Cli, tmp_path: Path):
    log = tmp_path / "app.log"
    log.write_text("ready\n")
    assert cli("session", "tab", "--title", "Tables").code == 0
    assert cli("watch", "tab", "log", str(log)).code == 0
    assert cli("note", "tab", "attempt", "first try", "--status", "running").code == 0
    assert cli("snapshot", "tab").code == 0
    tables = {
        ("sessions",): ["SESSION", "VERSIONS", "tab", "Tables"],
        ("watches", "tab"): ["ID", "WATCH", f"log {log}", "you"],
        ("journal", "tab"): ["KIND", "STATUS", "attempt", "running", "first try"],
        ("snapshots", "tab"): ["VERSION", "TRIGGER", "v1", "manual"],
        ("versions", "tab"): ["VERSION", "v1"],
    }
    for args, words in tables.items():
        shown = cli(*args)
        assert shown.code == 0, shown.err
        assert all(w in shown.out for w in words), (args, shown.out)
        assert not shown.out.lstrip().startswith(("[", "{")), args
        after, before = cli(*args, "--json"), cli("--json", *args)
        assert json.loads(after.out) == json.loads(before.out), args
    assert [w["spec"]["path"] for w in json.loads(cli("--json", "watches", "tab").out)] == [
        str(log)
    ]


def test_a_change_says_what_it_did_in_one_line(cli: Cli):
    def line(*args: str) -> str:
        done = cli(*args)
        assert done.code == 0, (args, done.err)
        assert done.out.count("\n") == 1, (args, done.out)
        return done.out.strip()

    assert line("session", "say") == "created session say"
    assert line("session", "say", "--objective", "tell me") == "updated session say: objective"
    assert line("watch", "say", "port", "1") == "watching port 1 in session say (watch 1)"
    assert line("note", "say", "attempt", "try", "--status", "running") == (
        "added journal entry 1 (attempt, running) of session say: try"
    )
    assert line("update", "say", "1", "--status", "failed").startswith(
        "updated journal entry 1 (attempt, failed)"
    )
    assert line("heartbeat", "say") == "marked session say active"
    assert line("message", "say", "still failing") == "recorded the message in session say"
    assert line("action", "say", "--command", "echo hi", "--exit", "0") == (
        "recorded `echo hi` (exit 0) in session say"
    )
    assert line("unwatch", "say", "1") == "removed watch 1 from session say"
    assert line("prune", "--keep-days", "30") == "removed 0 versions older than 30 days"
    assert re.fullmatch(r"say v\d+ \(\d+ signals?\)", line("snapshot", "say"))
    dump = cli("message", "say", "")  # '' is "continue": the fresh dump instead
    assert dump.code == 0 and dump.out.startswith("# say · v") and "tell me" in dump.out


# --- one watch of a kind and target -----------------------------------------------------------


def test_the_same_watch_asked_for_twice_is_the_first(client: httpx.Client, tmp_path: Path):
    client.put("/api/sessions/twice", json={}).raise_for_status()
    spec = {"kind": "log", "path": str(tmp_path / "a.log")}
    first = client.post("/api/sessions/twice/watches", json=spec)
    again = client.post("/api/sessions/twice/watches", json=spec | {"lines": 40})  # the default
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    other = client.post("/api/sessions/twice/watches", json=spec | {"lines": 5})
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    assert len(client.get("/api/sessions/twice/watches").json()) == 2


def test_a_watch_ctxd_added_becomes_yours_when_you_ask_for_it(tmp_path: Path):
    from ctxd.models import LogWatch, SessionIn
    from ctxd.store.database import Store

    store = Store(tmp_path / "ctxd.db")
    store.put_session("adopt", SessionIn())
    spec = LogWatch(path=str(tmp_path / "out.log"))
    auto, added = store.add_watch_once("adopt", spec, 10, reason="output of `make`")
    assert added and auto.auto
    again, added = store.add_watch_once("adopt", spec, 10, reason="output of `make` again")
    assert not added and again.auto and again.reason == "output of `make`"
    mine, added = store.add_watch_once("adopt", spec, 1)  # at the limit: still no 409
    assert not added and mine.id == auto.id and not mine.auto and mine.reason is None


def test_the_cli_says_it_already_watches(cli: Cli):
    cli("session", "dup")
    first = cli("watch", "dup", "process", "trainer.py", "--expect-port", "8000")
    again = cli("watch", "dup", "process", "trainer.py", "--expect-port", "8000")
    assert first.out.strip() == "watching process trainer.py in session dup (watch 1)"
    assert again.code == 0
    assert again.out.strip() == "already watching process trainer.py in session dup (watch 1)"
    assert json.loads(cli("watch", "dup", "process", "trainer.py", "--expect-port", "8000",
                          "--json").out)["id"] == 1  # fmt: skip
    assert len(json.loads(cli("watches", "dup", "--json").out)) == 1


# --- search -----------------------------------------------------------------------------------


def test_search_takes_a_session_or_searches_all(cli: Cli):
    for sid in ("alpha", "beta"):
        cli("session", sid)
        cli("note", sid, "finding", f"zebra stripes in {sid}")
    every = json.loads(cli("search", "zebra", "--json").out)
    assert {h["session"] for h in every["hits"]} == {"alpha", "beta"}
    one = json.loads(cli("search", "alpha", "zebra", "--json").out)
    assert {h["session"] for h in one["hits"]} == {"alpha"}
    assert "alpha" in cli("search", "zebra").out and "beta" in cli("search", "zebra").out
    nothing = cli("search")
    assert nothing.code == 2 and "give a QUERY: ctxd search [SESSION] QUERY" in nothing.err
    assert "required" not in nothing.err
    three = cli("search", "alpha", "zebra", "stripes")
    assert three.code == 2 and "in quotes" in three.err
    unquoted = cli("search", "zebra", "stripes")  # two words: a session and a query
    assert unquoted.code == 3 and "ctxd search 'zebra stripes'" in unquoted.err


# --- the service's address --------------------------------------------------------------------


def test_url_without_a_scheme_is_http(cli: Cli, server: Server, monkeypatch):
    port = httpx.URL(server.url).port
    for given in (f"127.0.0.1:{port}", f"localhost:{port}"):
        up = cli("health", url=given)
        assert up.code == 0 and up.out.startswith("ctxd ") and " is up at http://" in up.out
    monkeypatch.setenv("CTXD_URL", f"localhost:{port}")
    from_env = subprocess.run(
        [sys.executable, "-m", "ctxd", "health", "--json"], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert from_env.returncode == 0 and json.loads(from_env.stdout)["status"] == "ok"


@pytest.mark.parametrize("given", ["http//localhost:8765", "ftp://localhost", "local host:1"])
def test_a_bad_url_is_a_plain_usage_error(cli: Cli, given: str):
    bad = cli("sessions", url=given)
    assert bad.code == 2 and bad.err.startswith(f"ctxd: --url: {given!r}") and "http" in bad.err
    assert "UnsupportedProtocol" not in bad.err and "ctxd serve" not in bad.err


# --- errors in the command line's words -------------------------------------------------------


def test_errors_name_the_flags_and_say_rules_in_words(cli: Cli):
    cli("session", "words")
    process = cli("watch", "words", "process")
    assert process.code == 2 and "give one of a regex TARGET, --pid or --name" in process.err
    assert "'pid'" not in process.err and "Value error" not in process.err
    slurm = cli("watch", "words", "slurm", "--workdir", "/tmp")
    assert slurm.code == 2 and "--mine" in slurm.err and "'mine': true" not in slurm.err
    assert "TARGET: a path or glob" in cli("watch", "words", "log").err
    assert "port number, not 'http'" in cli("watch", "words", "port", "http").err
    fact = cli("note", "words", "fact", "42")
    assert fact.code == 2 and "--key" in fact.err
    status = cli("note", "words", "attempt", "x", "--status", "bogus")
    assert status.code == 2 and (
        "the status of attempt entries is running, failed, succeeded or abandoned, not 'bogus'"
        in status.err
    )
    assert "a 'attempt'" not in status.err and "body:" not in status.err
    assert "finding entries have no status" in cli("note", "words", "finding", "x", "--status",
                                                   "open").err  # fmt: skip
    for name in ("Bad Name", "a/b"):
        named = cli("session", name)
        assert named.code == 2 and "a session name is lowercase letters, digits" in named.err
        assert "[a-z0-9]" not in named.err and "regex" not in named.err


def test_the_api_says_the_session_name_rule_in_words(client: httpx.Client):
    answer = client.put("/api/sessions/Not%20Ok", json={})
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith("a session name is lowercase letters")
    long = client.get("/api/sessions/" + "a" * 65)
    assert long.status_code == 400 and "up to 64 characters" in long.json()["detail"]


def test_a_cli_call_does_not_import_httpxs_own_command_line():
    """httpx imports its CLI (rich, pygments, click) when it can: some 50 ms on every `ctxd`
    call, for nothing ctxd uses."""
    probe = (
        "import sys, ctxd.cli.main, ctxd.cli.commands;"
        "print(sorted({'rich', 'pygments'} & set(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"
