"""Which session a hook's agent is in, decided by the server; prompts; the CLI's new options."""

from pathlib import Path

import httpx
from ctxd.harness.policy import HOOK_MAX_CHARS

from tests.conftest import Server
from tests.test_cli_scripting import as_json, ctxd


def hooked(client: httpx.Client, harness: str = "claude", root: str = "", **sent: str) -> dict:
    """The session a hook event lands in, sent as the hooks and the opencode plugin send it
    (`POST /api/hooks/{harness}`); `sent`: the payload, plus `session` (CTXD_SESSION)."""
    session = sent.pop("session", None)
    body: dict = {"payload": sent, "root": root} | ({"session": session} if session else {})
    response = client.post(f"/api/hooks/{harness}", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["hook_max_chars"] == HOOK_MAX_CHARS  # the budget the plugin injects
    return client.get(f"/api/sessions/{answer['session']}").json()


def ended(cwd: Path | str, conversation: str, **fields: str) -> dict[str, str]:
    """Claude Code's SessionEnd: its conversation is not live any more when the next starts."""
    sent = {"hook_event_name": "SessionEnd", "session_id": conversation, **fields}
    return sent | ({"cwd": str(cwd)} if cwd else {})


def test_resolve_by_env_scope_checkout_and_harness_id(client: httpx.Client, tmp_path: Path):
    top = tmp_path / "Train Loop"
    (top / "src").mkdir(parents=True)
    made = hooked(client, root=str(top), **ended(top / "src", "c1"))
    assert (made["id"], made["cwd"], made["title"]) == ("train-loop", str(top), "Train Loop")
    # The same folder again: the session scoped to it, not a new one.
    assert hooked(client, **ended(top / "src" / "deeper", "c2"))["id"] == "train-loop"

    # Another checkout with the same folder name gets a suffix, not the first one's session.
    other = tmp_path / "elsewhere" / "Train Loop"
    other.mkdir(parents=True)
    second = hooked(client, "opencode", event="session.idle", sessionID="o1", cwd=str(other))
    assert second["id"].startswith("train-loop-") and second["cwd"] == str(other)

    # A session of that name made by hand without a scope is adopted.
    client.put("/api/sessions/adopt-me", json={"title": "mine"})
    adopted = hooked(client, **ended(tmp_path / "adopt-me", "c3"))
    assert (adopted["id"], adopted["title"]) == ("adopt-me", "mine")

    assert hooked(client, session="pinned", **ended(top, "c4"))["id"] == "pinned"
    by_id = hooked(client, **ended("", "3F1C-2a9e"))
    assert (by_id["id"], by_id["title"]) == ("claude-3f1c-2a9e", "Claude Code session")
    bare = client.post("/api/hooks/claude", json={"payload": ended("relative/dir", "")})
    assert bare.status_code == 400 and "harness_session" in bare.json()["detail"]


def test_a_prompt_is_recorded_and_a_bare_continue_returns_the_cut_dump(client: httpx.Client):
    client.put("/api/sessions/p", json={"objective": "ship it"})
    said = client.post("/api/sessions/p/prompts", json={"text": "look at the loss"})
    assert said.status_code == 202
    dump = client.post("/api/sessions/p/prompts", json={"text": "Continue!", "max_chars": 300})
    assert dump.status_code == 200 and dump.headers["content-type"].startswith("text/markdown")
    assert len(dump.text) <= 300
    full = client.get("/api/sessions/p/snapshots/1").json()
    assert full["narrative"]["latest_message"] == "look at the loss"
    assert full["header"]["trigger"] == "continue"


def test_cli_watch_options_and_falsy_session_values(server: Server, tmp_path):
    url = server.url
    as_json(url, "session", "w", "--schedule-every", "600")
    assert as_json(url, "session", "w", "--schedule-every", "0")["schedule_every_s"] == 0
    log = tmp_path / "app.log"
    log.write_text("ok\n")
    spec = as_json(url, "watch", "w", "log", str(log), "--files", "2", "--errors", "FATAL")["spec"]
    assert (spec["files"], spec["errors"]) == (2, ["FATAL"])
    proc = as_json(url, "watch", "w", "process", "--name", "python3")["spec"]
    assert proc["name"] == "python3" and proc["match"] is None
    cmd = as_json(url, "watch", "w", "command", "git-status", "--timeout", "5")["spec"]
    assert (cmd["name"], cmd["timeout_s"]) == ("git-status", 5.0)
    refused = ctxd(url, "watch", "w", "command", "rm-everything")
    assert refused.returncode == 2 and "403" in refused.stderr
    # `versions` still answers, as the old name of `snapshots`.
    assert as_json(url, "versions", "w") == as_json(url, "snapshots", "w") == []
