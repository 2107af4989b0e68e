"""A secret stored before ctxd learned it is one is taken out of everything it stored: a log line
and a command's output hold a key, snapshots keep them (sections, dumps, Markdown files, the
search index); then the agent runs the server with `--api-key KEY` and ctxd, having learned
the value, rewrites every place it was stored, the WAL included. `ctxd scrub` does the same at
once for a value a person pipes to it."""

import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import Server, claude_hooks, wait_until
from tests.test_canary import _db_text, _forms

KEY = "velvet-harbor-4217-kite"  # no known shape: only its flag says it is a key
PASSWORD = "orchid-lamp-0817-brook"  # a person's, leaked in a prompt: only they can name it


def _stored_bytes(data_dir: Path) -> bytes:
    """The database file, its WAL and every Markdown file, raw."""
    files = [data_dir / "ctxd.db", data_dir / "ctxd.db-wal", *data_dir.glob("*/*.md")]
    return b"".join(p.read_bytes() for p in files if p.is_file() and not p.is_symlink())


def _holds(data_dir: Path, value: str) -> bool:
    raw = _stored_bytes(data_dir)
    text = _db_text(data_dir / "ctxd.db")
    return any(form.encode() in raw or form in text for form in _forms(value))


def test_a_key_stored_before_its_flag_named_it_is_taken_out_of_everything(
    rooted_server: Server, tmp_path: Path
):
    server = rooted_server
    work = tmp_path / "svc"
    work.mkdir()
    log = work / "app.log"
    log.write_text(f"connecting to the model API with key {KEY}\nstarted\n")
    client = httpx.Client(base_url=server.url, timeout=60)

    hook = claude_hooks(client, "k-1", work)

    hook("UserPromptSubmit", prompt=f"the staging password is {PASSWORD}; find why it fails")
    hook("PostToolUse", tool_name="Bash", tool_use_id="toolu_1",
         tool_input={"command": "tail -2 app.log"},
         tool_response={"stdout": log.read_text(), "stderr": "", "interrupted": False})  # fmt: skip
    client.post("/api/sessions/svc/watches", json={"kind": "log", "path": str(log)})
    client.post("/api/sessions/svc/snapshots").raise_for_status()
    first = client.get("/api/sessions/svc/resume").text
    assert KEY in first  # stored as any line is: nothing yet says it is a secret
    assert _holds(server.data_dir, KEY)

    # the agent names it a key: learned, and scrubbed from what was stored before
    line = f"nohup python3 srv.py --api-key {KEY} > app.log 2>&1 &"
    hook("PostToolUse", tool_name="Bash", tool_use_id="toolu_2", tool_input={"command": line},
         tool_response={"stdout": "", "stderr": "", "interrupted": False})  # fmt: skip
    wait_until(lambda: not _holds(server.data_dir, KEY), "the key scrubbed from the store")
    for version in range(1, 3):
        old = client.get(f"/api/sessions/svc/snapshots/{version}/markdown")
        if old.status_code == 200:
            assert KEY not in old.text and "[REDACTED]" in old.text
    hits = client.get("/api/sessions/svc/search", params={"q": "connecting"}).json()["hits"]
    assert hits and not any(KEY in hit["snippet"] for hit in hits)
    assert KEY not in client.get("/api/sessions/svc/resume").text

    # a value only the person knows leaked: piped to `ctxd scrub`, never on its command line
    assert _holds(server.data_dir, PASSWORD)
    cli = [sys.executable, "-m", "ctxd", "--url", server.url, "scrub"]
    done = subprocess.run(cli, input=f"{PASSWORD}\n", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "scrubbed 1 secret value(s)" in done.stdout, done.stdout
    assert not _holds(server.data_dir, PASSWORD)
    again = subprocess.run(cli, input="", capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing to scrub" in again.stdout, again.stdout
    # the service keeps answering: every version still reads back
    assert client.get("/api/sessions/svc/snapshots/1").status_code == 200


def test_scrub_refuses_what_cannot_be_a_secret_and_answers_garbage_plainly(server: Server):
    client = httpx.Client(base_url=server.url, timeout=30)
    for body in ({"values": ["short"]}, {"values": "orchid-lamp"}, {"other": 1},
                 {"values": ["x" * 5000]}, {"values": ["long-enough-value"] * 65}):  # fmt: skip
        answer = client.post("/api/scrub", json=body)
        assert answer.status_code == 400, (body, answer.text)
    garbage = client.post("/api/scrub", content=b"\xff\x00not json",
                          headers={"content-type": "application/json"})  # fmt: skip
    assert garbage.status_code == 400
    assert client.post("/api/scrub").json() == {"values": 0, "rows": 0, "blobs": 0, "dumps": 0}
