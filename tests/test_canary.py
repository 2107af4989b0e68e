"""Canary secrets planted everywhere ctxd looks never come out anywhere ctxd writes or answers.

Planted: a watched process's flags and environment, a log (raw, re-encoded, and a private key
cut off by the tail window), artifact names, a command's output and journal entries; round two
adds `-p VALUE`, `-u user:password`, tokens in URL query strings, names ending in KEY, a
DATABASE_URL password that reappears bare, a secret fact, a value learned before a restart.
Round three adds what an agent writes through the MCP tools (an objective, a finding, an
attempt's outcome, a recorded command and its output); round four a harness hook's payload (a
Bash call's command and output). Searched: the database (every value,
decompressed, and the raw -wal and -shm bytes), the Markdown files, every HTTP response, every
MCP tool's answer (each tool the server lists, its errors too) and every resource, and ctxd's
own log. Each channel also plants a marker that is no secret: the marker must come out where
that channel shows (in the stored snapshot's own section and in the dump MCP resumes from),
and each of its secrets' places must read redacted there (`[REDACTED]` where the secret
stood), so a channel, or a secret, that was never read cannot pass as one that leaked nothing.
"""

import asyncio
import base64
import contextlib
import json
import sqlite3
import sys
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import pytest
from ctxd.store.database import Store

from tests.conftest import start_server, stop_server

# Shapes the content rules know, and values only their names reveal.
FLAG_TOKEN = "ghp_" + "CanaryFlag0" * 3 + "abc"
FLAG_VALUE = "canary-flag-value-4471"
URL_PASSWORD = "canary-url-pw-8812"
ENV_VALUE = "canary-env-k3y-5509"  # reappears in the log, a file name and command output
HF_VALUE = "hf_" + "CanaryHuggingFace" * 2
LOG_BEARER = "canary-bearer-tok-6620"
PEM_LINE = "MIIEcanaryPrivateKeyMaterial0123456789abcdefABCDEF"
ARTIFACT_TOKEN = "sk-ant-api03-" + "CanaryArtifact_" * 3
CMD_PASSWORD = "canary-cmd-pw-3307"
CMD_TOKEN = "glpat-" + "CanaryCommand" * 2

# Round two: forms a red-team pass got through.
MYSQL_P = "Hunter2CanaryPw"
CURL_PW = "canary-curl-pw-2231"
QUERY_TOKEN = "canaryQueryTok0123456789abc"
QUERY_LOG_TOKEN = "canaryLogQuery9876543210zyx"
KEY_VALUE = "canary-svc-key-7781"
NOTE_KEY = "canary-note-key-4410"
DBURL_PW = "canary-dburl-pw-5523"
FACT_VALUE = "canary-fact-value-9901"
# Characters that URL-encoding and JSON escaping change, so each planted form differs.
ENC_VALUE = 'canary"enc\\k3y+7/731 x'

# Round three: what an agent writes through the MCP tools.
OBJECTIVE_PW = "canary-objective-pw-1186"
FINDING_PW = "canary-finding-pw-3390"
OUTCOME_KEY = "canary-outcome-key-7245"
ACTION_PW = "canary-action-pw-5821"
ACTION_TOKEN = "xoxb-" + "CanaryAction0" * 2

# Round four: a harness hook's payload (a Bash tool call, its command and its output).
HOOK_TOKEN = "ghp_" + "CanaryHookTok0" * 2 + "xyzw1234"
HOOK_OUT_KEY = "canary-hook-out-key-6218"

CANARIES = [
    FLAG_TOKEN, FLAG_VALUE, URL_PASSWORD, ENV_VALUE, HF_VALUE, LOG_BEARER, PEM_LINE,
    ARTIFACT_TOKEN, CMD_PASSWORD, CMD_TOKEN,
    MYSQL_P, CURL_PW, QUERY_TOKEN, QUERY_LOG_TOKEN, KEY_VALUE, NOTE_KEY, DBURL_PW, FACT_VALUE,
    ENC_VALUE,
    OBJECTIVE_PW, FINDING_PW, OUTCOME_KEY, ACTION_PW, ACTION_TOKEN,
    HOOK_TOKEN, HOOK_OUT_KEY,
]  # fmt: skip

R = "[REDACTED]"


@dataclass(frozen=True)
class Channel:
    """One way a secret reaches ctxd: where the stored snapshot shows it (a dotted path in
    the snapshot's JSON, list items by index), a text that is no secret and must show there,
    its secrets, and each secret's place as it must read there once redacted: the secret was
    read, and replaced where it stood. `stored`: places that show in the database only (an
    output kept for search, not shown in a snapshot)."""

    section: str
    marker: str
    secrets: tuple[str, ...]
    redacted: tuple[str, ...]
    stored: tuple[str, ...] = ()


CHANNELS = {
    "process flags": Channel(
        "observations.processes.items.0.argv",
        "visible-argv-marker",
        (FLAG_TOKEN, FLAG_VALUE, URL_PASSWORD, MYSQL_P, CURL_PW, QUERY_TOKEN),
        (
            f"--api-key\n{R}",
            f"--hub={R}",
            f"--db=postgres://app:{R}@db:5432/x",
            f"-p\n{R}",
            f"-u\ncanuser:{R}",
            f"--endpoint\nhttps://api.example.com/v1?api_key={R}",
        ),
    ),
    "process environment": Channel(
        "observations.processes.items.0.env",
        "CANARY_RUN_MODE=visible-env-marker",
        (ENV_VALUE, HF_VALUE, ENC_VALUE, KEY_VALUE, DBURL_PW),
        (
            f"CANARY_SERVICE_TOKEN={R}",
            f"HF_TOKEN={R}",
            f"CANARY_ENC_TOKEN={R}",
            f"MY_SERVICE_KEY={R}",
            f"DATABASE_URL=postgres://app:{R}@db/x",
        ),
    ),
    "log": Channel(
        "observations.logs.items.0.lines",
        "visible-log-marker",
        (PEM_LINE, LOG_BEARER, QUERY_LOG_TOKEN, ENV_VALUE, ENC_VALUE, KEY_VALUE, DBURL_PW),
        (
            f"{R}-----END PRIVATE KEY-----",
            f"Authorization: Bearer {R}",
            # the known values (the environment's), each in its four planted forms
            *[
                f"loaded {R} from the environment",
                f"blob dXNlcjp{R} end",
                f"GET /cb?q={R}&x=1",
                f'payload {{"note": "{R}"}}',
            ]
            * 2,
            f"access_token={R}",
            f"MY_SERVICE_KEY={R}",
            f"auth failed for password {R}",
        ),
    ),
    "artifact names": Channel(
        "observations.artifacts",
        "visible-artifact-marker",
        (ARTIFACT_TOKEN, ENV_VALUE),
        (f"/model-{R}.bin", f"/cache-{R}.bin"),
    ),
    "command output": Channel(
        "observations.commands.items.0.output",
        "visible-command-marker",
        (CMD_PASSWORD, CMD_TOKEN, ENV_VALUE),
        (f"db password={R}\n", f"token {R}\n", f"k {R}\n"),
    ),
    "journal note": Channel(
        "narrative.notes", "visible-note-marker", (NOTE_KEY,), (f"MY_SERVICE_KEY={R}",)
    ),
    "journal fact": Channel(
        "narrative.facts", "visible_api_key", (FACT_VALUE,), (f"visible_api_key={R}",)
    ),
    "MCP objective": Channel(
        "narrative.objective", "visible-objective-marker", (OBJECTIVE_PW,), (f"PASSWORD={R}",)
    ),
    "MCP finding": Channel(
        "narrative.findings",
        "visible-finding-marker",
        (FINDING_PW,),
        (f"DB_PASSWORD={R} still works",),
    ),
    "MCP attempt outcome": Channel(
        "narrative.attempts", "visible-outcome-marker", (OUTCOME_KEY,), (f"401 with api_key={R}",)
    ),
    "MCP recorded command": Channel(
        "narrative.recent_commands",
        "visible-action-marker",
        (ACTION_PW, ACTION_TOKEN),
        (f"curl -u deploy:{R} https://example.com/visible-action-marker",),
        stored=(f"uploaded; api_token={R} refreshed",),
    ),
    "hook payload": Channel(
        "narrative.recent_commands",
        "visible-hook-marker",
        (HOOK_TOKEN, HOOK_OUT_KEY),
        (f"export GITHUB_TOKEN={R}; ./push.sh --tag visible-hook-marker",),
        stored=(f"pushed; api_key={R} ok",),
    ),
}


def _b64_cores(raw: bytes) -> list[str]:
    """The base64 characters only `raw` determines, at each of the 3 byte offsets it may sit
    at inside a longer encoded string (such as `user:password`)."""
    cores = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        core = encoded[-(-offset // 3) * 4 : (offset + len(raw)) // 3 * 4]
        cores += [core, core.replace("+", "-").replace("/", "_")]
    return cores


def _forms(value: str) -> list[str]:
    forms = {value, quote(value, safe=""), quote_plus(value), json.dumps(value)[1:-1]}
    return sorted(forms | set(_b64_cores(value.encode())))


def test_the_leak_scan_sees_every_planted_encoding() -> None:
    assert len(set(_forms(ENC_VALUE)) - set(_b64_cores(ENC_VALUE.encode()))) == 4
    for planted in _planted_lines(ENC_VALUE) + _planted_lines(ENV_VALUE):
        assert _leaks(planted), planted


def _leaks(text: str) -> list[str]:
    return [form for value in CANARIES for form in _forms(value) if form in text]


def _db_text(db: Path) -> str:
    """Every value in every table, with compressed blobs inflated."""
    conn = sqlite3.connect(db)
    parts: list[str] = []
    try:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    if isinstance(value, bytes):
                        with contextlib.suppress(zlib.error):
                            value = zlib.decompress(value)
                        value = value.decode("utf-8", "replace")
                    parts.append(str(value))
    finally:
        conn.close()
    # sections stored as deltas (zlib with a preset dictionary) inflate only through the store
    store = Store(db)
    try:
        for sid, version, _ in store.iter_versions():
            parts.append(store.get_snapshot(sid, version).model_dump_json())
            parts.append(store.get_markdown(sid, version))
    finally:
        store.close()
    return "\n".join(parts)


def _planted_lines(value: str) -> list[str]:
    """A value in a log as it is, URL-encoded, JSON-escaped and inside base64, in words no
    name or shape rule flags: only the known-value rule can find them."""
    return [
        f"loaded {value} from the environment",
        f"blob {base64.b64encode(('user:' + value).encode()).decode()} end",
        f"GET /cb?q={quote(value, safe='')}&x=1",
        f"payload {json.dumps({'note': value})}",
    ]


def _hook_payload(cwd: Path) -> dict[str, Any]:
    """Claude Code's PostToolUse event of a Bash call, as its hook hands it to ctxd."""
    return {
        "session_id": "3f1c2a9e-5b7d-4c1e-9a0b-7e2d8c6f4a11",
        "transcript_path": str(cwd / "transcript.jsonl"),
        "cwd": str(cwd),
        "permission_mode": "default",
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": f"export GITHUB_TOKEN={HOOK_TOKEN}; ./push.sh --tag "
                                  "visible-hook-marker"},
        "tool_response": {"stdout": f"pushed; api_key={HOOK_OUT_KEY} ok", "stderr": "",
                          "interrupted": False},
    }  # fmt: skip


def _plant(tmp_path: Path, spawn: Any) -> tuple[Any, Path, Path]:
    log = tmp_path / "server.log"
    body = "\n".join(PEM_LINE + str(i) for i in range(40))
    log.write_text(
        "-----BEGIN PRIVATE KEY-----\n" + body + "\n-----END PRIVATE KEY-----\n"
        f"curl -H 'Authorization: Bearer {LOG_BEARER}' http://127.0.0.1:8000/v1\n"
        + "".join(line + "\n" for line in _planted_lines(ENV_VALUE) + _planted_lines(ENC_VALUE))
        + "serving on port 8000 (visible-log-marker)\n"
        f"fetching https://api.example.com/v1/models?access_token={QUERY_LOG_TOKEN}\n"
        f"MY_SERVICE_KEY={KEY_VALUE}\n"
        f"auth failed for password {DBURL_PW}\n"
    )
    builds = tmp_path / "build"
    builds.mkdir()
    (builds / f"model-{ARTIFACT_TOKEN}.bin").write_bytes(b"x")
    (builds / f"cache-{ENV_VALUE}.bin").write_bytes(b"y")
    (builds / "visible-artifact-marker.bin").write_bytes(b"z")
    proc = spawn(
        sys.executable, "-c", "import time; time.sleep(300)",
        "--run-name", "visible-argv-marker",
        "--api-key", FLAG_VALUE, f"--hub={FLAG_TOKEN}",
        f"--db=postgres://app:{URL_PASSWORD}@db:5432/x",
        "-p", MYSQL_P, "-u", f"canuser:{CURL_PW}",
        "--endpoint", f"https://api.example.com/v1?api_key={QUERY_TOKEN}",
        env={
            "CANARY_SERVICE_TOKEN": ENV_VALUE, "HF_TOKEN": HF_VALUE, "PATH": "/usr/bin:/bin",
            "CANARY_ENC_TOKEN": ENC_VALUE, "CANARY_RUN_MODE": "visible-env-marker",
            "MY_SERVICE_KEY": KEY_VALUE, "DATABASE_URL": f"postgres://app:{DBURL_PW}@db/x",
        },
    )  # fmt: skip
    return proc, log, builds


@dataclass
class McpRun:
    """Every answer of one MCP client session: `text` (each tool result and resource read,
    errors included, as the client received them), the full dump resumed at the end, and the
    names of the tools the server listed and of those called."""

    text: str = ""
    dump: str = ""
    listed: set[str] = field(default_factory=set)
    called: set[str] = field(default_factory=set)


async def _mcp_session(url: str, sid: str, cwd: Path) -> McpRun:
    """The official MCP client calls each tool, as an agent writing secrets into its session
    would, then reads each resource. A tool the server lists and this does not call fails the
    test (`listed == called`), so a new tool is scanned from its first day."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    run, out = McpRun(), []

    async def call(name: str, **args: Any) -> Any:
        result = await session.call_tool(name, args)
        run.called.add(name)
        out.extend(c.model_dump_json() for c in result.content)
        out.append(json.dumps(result.structured_content))
        return result

    def answer(result: Any) -> Any:
        assert not result.is_error, result.content
        return result.structured_content

    async with (
        streamable_http_client(f"{url}/mcp") as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        run.listed = {tool.name for tool in (await session.list_tools()).tools}
        objective = f"visible-objective-marker: reach staging with PASSWORD={OBJECTIVE_PW}"
        answer(await call("put_session", session=sid, objective=objective))
        finding = f"visible-finding-marker: the staging DB_PASSWORD={FINDING_PW} still works"
        answer(await call("add_entry", session=sid, kind="finding", text=finding))
        attempt = answer(
            await call("add_entry", session=sid, kind="attempt", text="retry the upload")
        )
        outcome = f"visible-outcome-marker: 401 with api_key={OUTCOME_KEY}"
        answer(
            await call(
                "update_entry", session=sid, entry_id=attempt["id"], status="failed",
                outcome=outcome,
            )
        )  # fmt: skip
        command = f"curl -u deploy:{ACTION_PW} https://example.com/visible-action-marker"
        output = f"uploaded; api_token={ACTION_TOKEN} refreshed"
        answer(
            await call(
                "record_action", session=sid, command=command, cwd=str(cwd), exit_status=0,
                output=output,
            )
        )  # fmt: skip
        added = answer(await call("add_watch", session=sid, watch={"kind": "port", "port": 9}))
        answer(await call("remove_watch", session=sid, watch_id=added["id"]))
        for name in ("list_watches", "list_entries", "list_snapshots"):
            answer(await call(name, session=sid))
        answer(await call("list_sessions"))
        answer(await call("list_sessions", cwd=str(cwd)))
        latest = answer(await call("take_snapshot", session=sid, force=True, note="mcp"))
        answer(await call("take_snapshot", session=sid))  # nothing new: confirmed
        await call("resume", session=sid)  # fresh, cut to the hook budget
        await call("resume", session=sid, fresh=False, since=1)
        dump = await call("resume", session=sid, fresh=False, max_chars=None)
        run.dump = "".join(c.text for c in dump.content if c.type == "text")
        version = latest["version"]
        answer(await call("diff", session=sid, from_version=1, to_version=version))
        answer(await call("search", query="visible", session=sid))
        # what the session's attempts came to since the first version: none waits here
        answer(await call("wait_for_news", session=sid, since=1, wait_s=0))
        answer(await call("search", query="REDACTED OR staging OR deploy"))
        # A secret in the query itself: the answer names the query, redacted.
        answer(await call("search", query=f'"{ENV_VALUE}"', session=sid))
        # Refusals carry text too.
        for name, args in (
            ("resume", {"session": "no-such-session"}),
            ("diff", {"session": sid, "from_version": version, "to_version": 1}),
            ("update_entry", {"session": sid, "entry_id": 99999, "text": FINDING_PW}),
            ("search", {"query": f"{ACTION_PW} NEAR(", "session": sid}),
        ):
            assert (await call(name, **args)).is_error, name
        resources = (await session.list_resources()).resources
        assert any(str(r.uri) == f"ctxd://sessions/{sid}/latest.md" for r in resources)
        out.append(json.dumps([r.model_dump(mode="json") for r in resources]))
        templates = (await session.list_resource_templates()).resource_templates
        out.append(json.dumps([t.model_dump(mode="json") for t in templates]))
        for resource in resources:
            out.append((await session.read_resource(resource.uri)).model_dump_json())
        try:
            await session.read_resource("ctxd://sessions/no-such-session/latest.md")
        except MCPError as exc:
            out.append(str(exc))
        else:
            raise AssertionError("a resource of no session was read")
    run.text = "\n".join(out)
    return run


def _section(snapshot: dict[str, Any], dotted: str) -> str:
    """The part of the snapshot at `dotted`, as text: a string as it is, a list of strings a
    line each, a mapping of strings `key=value` a line each, anything else as JSON."""
    part: Any = snapshot
    for key in dotted.split("."):
        part = part[int(key)] if key.isdigit() else part[key]
    if isinstance(part, str):
        return part
    if isinstance(part, list) and all(isinstance(x, str) for x in part):
        return "".join(f"{x}\n" for x in part)
    if isinstance(part, dict) and all(isinstance(x, str) for x in part.values()):
        return "".join(f"{k}={v}\n" for k, v in part.items())
    return json.dumps(part)


def _each_channel_was_read(snapshot: dict[str, Any], dump: str, stored: str) -> None:
    """Each channel's marker is in its own section of the stored snapshot, and in the dump MCP
    resumed from; each of its secrets was read and replaced where it stood (its place reads
    as the channel's `redacted` text there, or `stored` in the database); none of its secrets
    is in either, in any planted form."""
    for name, channel in CHANNELS.items():
        section = _section(snapshot, channel.section)
        assert channel.marker in section, f"{name}: not read ({channel.section}: {section[:300]})"
        for place, times in Counter(channel.redacted).items():
            assert section.count(place) >= times, f"{name}: {place!r} not in {section[:600]}"
        for place in channel.stored:
            assert place in stored, f"{name}: {place!r} not in the database"
        assert channel.marker in dump, f"{name}: missing from the resumed dump"
        forms = [form for value in channel.secrets for form in _forms(value)]
        leaked = [f for f in forms if f in section] + [f"dump: {f}" for f in forms if f in dump]
        assert not leaked, f"{name}: {leaked}"


def test_canaries_never_come_out(tmp_path: Path, spawn: Any) -> None:
    proc, log, builds = _plant(tmp_path, spawn)
    script = (
        f"echo 'db password={CMD_PASSWORD}'; echo 'token {CMD_TOKEN}'; echo 'k {ENV_VALUE}'; "
        "echo 'visible-command-marker'"
    )
    env = {"CTXD_COMMANDS": json.dumps({"canary": ["sh", "-c", script]})}
    data = tmp_path / "data"
    srv = start_server(data, tmp_path / "ctxd.log", env=env)
    responses: list[str] = []
    try:
        with srv.client() as c:

            def call(method: str, path: str, **kwargs: Any) -> httpx.Response:
                r = c.request(method, path, **kwargs)
                assert r.status_code < 500, (path, r.text[:300])
                responses.append(r.text)
                return r

            call("PUT", "/api/sessions/canary", json={"title": "canary"})
            for watch in (
                {
                    "kind": "process",
                    "pid": proc.pid,
                    "env": ["CANARY_*", "HF_*", "MY_*", "DATABASE_URL"],
                },
                {"kind": "log", "path": str(log), "lines": 20},
                {"kind": "artifact", "path": str(builds / "*.bin")},
                {"kind": "artifact", "path": str(builds)},
                {"kind": "command", "name": "canary"},
            ):
                assert call("POST", "/api/sessions/canary/watches", json=watch).status_code == 201
            for entry in (
                {"kind": "note", "text": f"visible-note-marker: set MY_SERVICE_KEY={NOTE_KEY}"},
                {"kind": "fact", "key": "visible_api_key", "text": FACT_VALUE},
            ):
                assert call("POST", "/api/sessions/canary/journal", json=entry).status_code < 300
            hooked = call(
                "POST",
                "/api/hooks/claude",
                json={"session": "canary", "payload": _hook_payload(tmp_path)},
            )
            assert hooked.status_code == 200, hooked.text  # fmt: skip
            call("POST", "/api/sessions/canary/snapshots", json={"force": True})
            call("POST", "/api/sessions/canary/snapshots", json={"force": True, "note": "two"})
            try:
                mcp = asyncio.run(_mcp_session(srv.url, "canary", tmp_path))
            except Exception as exc:  # pragma: no cover - depends on /mcp being mounted
                pytest.fail(f"MCP client failed: {type(exc).__name__}: {exc}")
            responses.append(mcp.text)
            assert mcp.listed == mcp.called, f"tools not scanned: {mcp.listed - mcp.called}"
            latest = call("GET", "/api/sessions/canary/snapshots").json()[0]["version"]
            for path in (
                "/api/sessions/canary/snapshots/1",
                f"/api/sessions/canary/snapshots/{latest}/markdown",
                "/api/sessions/canary/resume",
                f"/api/sessions/canary/diff?from=1&to={latest}",
                "/api/sessions/canary/watches",
                "/api/sessions/canary/journal",
                "/api/sessions/canary/search?q=visible",
                "/api/search?q=staging",
                "/api/sessions",
                "/",
                "/s/canary",
                f"/s/canary/v/{latest}",
                f"/s/canary/diff?from=1&to={latest}",
                "/s/canary/now",
            ):
                assert call("GET", path).status_code == 200, path
            call("POST", "/api/sessions/canary/messages", json={"text": ""})
            stored = call("GET", f"/api/sessions/canary/snapshots/{latest}").json()
            assert stored["observations"]["commands"]["items"], "the command ran"
        raw_files = {p.name: p.read_bytes() for p in data.glob("ctxd.db*")}
        assert any(name.endswith("-wal") for name in raw_files), "read while the WAL is live"
    finally:
        stop_server(srv)

    places = {f"response {i}": text for i, text in enumerate(responses)}
    places["database values"] = _db_text(data / "ctxd.db")
    _each_channel_was_read(stored, mcp.dump, places["database values"])
    places |= {name: raw.decode("latin-1") for name, raw in raw_files.items()}
    markdown = [p for p in data.rglob("*.md")]
    assert markdown
    places |= {str(path.relative_to(data)): path.read_text() for path in markdown}
    places["ctxd's own log"] = srv.log()
    leaks = {where: found for where, text in places.items() if (found := _leaks(text))}
    assert not leaks, f"{len(CANARIES)} planted values, leaked: {leaks}"


RESTART_VALUE = "canary-restart-pw-6604"


def test_a_secret_learned_before_a_restart_never_comes_out(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_server(
        data, tmp_path / "first.log", env={"CANARY_RESTART_API_KEY": RESTART_VALUE}
    )
    stop_server(first)  # it learned the value from its own environment, and kept a digest
    log = tmp_path / "app.log"
    raw = RESTART_VALUE.encode()
    log.write_text(
        f"retrying with {RESTART_VALUE}\n"
        f"GET /cb?k={quote(RESTART_VALUE, safe='')}&x=1\n"
        f"blob {base64.b64encode(raw).decode()}\n"
    )
    srv = start_server(data, tmp_path / "second.log")
    try:
        with srv.client() as c:
            c.put("/api/sessions/restart", json={"title": "restart"})
            watch = {"kind": "log", "path": str(log), "lines": 10}
            assert c.post("/api/sessions/restart/watches", json=watch).status_code == 201
            shot = c.post("/api/sessions/restart/snapshots", json={"force": True})
            assert shot.status_code < 300
            served = shot.text + c.get("/api/sessions/restart/resume").text
            assert "[REDACTED]" in served
    finally:
        stop_server(srv)
    forms = _forms(RESTART_VALUE)
    stored = [p for p in data.rglob("*") if p.is_file()]
    leaks = [str(p.name) for p in stored for form in forms if form.encode() in p.read_bytes()]
    leaks += [f"served {form}" for form in forms if form in served]
    assert not leaks, f"{len(forms)} forms planted, leaked: {leaks}"
