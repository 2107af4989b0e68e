"""Hardening, round four: another account on the box neither reads nor steers through ctxd (a
loopback caller whose socket the kernel says is another uid's is refused before any handler
runs: real `nobody` against a root-run service; ctxd's own account and root pass, a listed uid
passes), a session is never scoped to a folder of everyone's, and secrets given as flags or
headers are learned and never come back."""

import json
import os
import socket
from pathlib import Path

import pytest
from ctxd.http import caller

from tests.conftest import NOBODY, Server, as_nobody, start_server, stop_server

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="becoming another account needs root")


def request(url: str, method: str, path: str, body: dict | None = None) -> tuple[int, str]:
    """One HTTP request on a plain socket (the child that became nobody imports nothing)."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")  # fmt: skip
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(head.encode() + data)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    return status, answer.split(b"\r\n\r\n", 1)[1].decode(errors="replace")


@ROOT_ONLY
def test_another_account_can_neither_read_nor_write_through_a_root_ctxd(
    server: Server, tmp_path: Path
):
    secret = tmp_path / "root-only.log"
    secret.write_text("ROOT-SECRET-LINE\n")
    secret.chmod(0o600)

    def as_another_account() -> list[tuple[int, str]]:
        return [
            request(server.url, "GET", "/api/sessions"),
            request(server.url, "PUT", "/api/sessions/nobody1", {"cwd": "/tmp"}),
            request(
                server.url,
                "POST",
                "/api/sessions/nobody1/watches",
                {"kind": "log", "path": str(secret)},
            ),
            request(server.url, "GET", "/s/nobody1"),
        ]

    answers = as_nobody(as_another_account)
    assert [status for status, _ in answers] == [403, 403, 403, 403], answers
    assert f"uid {NOBODY} is refused" in answers[0][1]
    # nothing was made for it; ctxd's own account (root here) is answered as ever
    status, body = request(server.url, "GET", "/api/sessions")
    assert status == 200 and "nobody1" not in body
    assert request(server.url, "PUT", "/api/sessions/mine", {"cwd": str(tmp_path)})[0] == 201


@ROOT_ONLY
def test_a_listed_account_is_answered(tmp_path: Path):
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log",
                       env={"CTXD_ALLOWED_UIDS": f"[{NOBODY}]"})  # fmt: skip
    try:
        status, _ = as_nobody(lambda: request(srv.url, "GET", "/api/sessions"))
        assert status == 200
    finally:
        stop_server(srv)


def test_the_kernel_names_the_owner_of_a_loopback_connection():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()) as conn:
            accepted, client = listener.accept()
            with accepted:
                assert caller.owner(client, listener.getsockname()) == os.geteuid()
                # a port no connection uses: nobody to name
                assert caller.owner(("127.0.0.1", 1), listener.getsockname()) is None
            assert conn.getsockname() == client


def test_loopback_addresses_and_the_kernels_spelling_of_them():
    assert caller.is_loopback("127.0.0.1") and caller.is_loopback("::1")
    assert caller.is_loopback("::ffff:127.0.0.1") and not caller.is_loopback("10.0.0.2")
    assert not caller.is_loopback("testclient")
    assert caller._hex("127.0.0.1", 8765)[1] == "0100007F:223D"


def test_a_session_is_scoped_to_a_project_never_to_a_folder_of_everyone(client):
    for folder in ("/", "/tmp", "/tmp/", "/home", "/root", "/var/tmp"):
        answer = client.put("/api/sessions/zz", json={"cwd": folder})
        assert answer.status_code == 400 and "not a project" in answer.text, (folder, answer.text)
    assert client.get("/api/sessions/zz").status_code == 404
    # an agent working in /tmp itself gets its conversation's own session, scoped to nothing
    payload = {"hook_event_name": "UserPromptSubmit", "session_id": "conv-77", "cwd": "/tmp",
               "prompt": "look at the logs"}  # fmt: skip
    answer = client.post("/api/hooks/claude", json={"payload": payload, "root": ""})
    assert answer.status_code == 200, answer.text
    session = client.get(f"/api/sessions/{answer.json()['session']}").json()
    assert session["cwd"] is None and session["id"].startswith("claude-")


def test_secrets_given_as_flags_or_headers_are_learned_and_never_come_back(
    server: Server, client, tmp_path: Path
):
    key, password, bearer = "K9f2Lx7Qp3Zr8Tw1", "P4ss-w0rd-7Hq2Xz", "B3arer-9Tk7Wq2Lm5"
    client.put("/api/sessions/s", json={"cwd": str(tmp_path)})
    line = (f"nohup python3 srv.py --api-key {key} --password={password} "
            f"--hdr 'Authorization: Bearer {bearer}' > app.log 2>&1 &")  # fmt: skip
    first = {"kind": "command", "command": line, "cwd": str(tmp_path), "background": True}
    # each alone, later: in a command's output and in a prompt
    later = {"kind": "command", "command": "tail app.log", "cwd": str(tmp_path),
             "output_tail": f"using {key}\nauth {password} ok\ntoken {bearer}\n"}  # fmt: skip
    assert client.post("/api/sessions/s/actions", json={"actions": [first]}).status_code < 300
    assert client.post("/api/sessions/s/actions", json={"actions": [later]}).status_code < 300
    client.post("/api/sessions/s/messages", json={"text": f"try again with {bearer}"})
    dump = client.get("/api/sessions/s/resume").text
    stored = [p.read_bytes() for p in server.data_dir.rglob("*") if p.is_file()]
    for secret in (key, password, bearer):
        assert secret not in dump, secret
        assert not any(secret.encode() in data for data in stored), secret


def test_one_command_with_a_thousand_launches_is_recorded_linearly(client, tmp_path: Path):
    """A line sending off 1,000 programs (`./w0 >l0.log& ./w1 >l1.log& …`) is recorded with its
    first LAUNCHES_PER_COMMAND launches as attempts, each with its own log only, and four such
    hooks at once leave an ordinary hook answering (the time is measured in bench/)."""
    from concurrent.futures import ThreadPoolExecutor

    from ctxd.discovery.rules import LAUNCHES_PER_COMMAND

    client.put("/api/sessions/many", json={"cwd": str(tmp_path)})
    line = " ".join(f"./w{i} >l{i}.log&" for i in range(1000))
    crowd = {"kind": "command", "command": line, "cwd": str(tmp_path)}
    plain = {"kind": "command", "command": "ls", "cwd": str(tmp_path)}

    def post(action: dict) -> int:
        return client.post("/api/sessions/many/actions", json={"actions": [action]}).status_code

    with ThreadPoolExecutor(5) as pool:
        crowds = [pool.submit(post, crowd) for _ in range(4)]
        assert post(plain) < 300
        assert all(f.result() < 300 for f in crowds)
    dump = client.get("/api/sessions/many/resume").text
    last = 4 * LAUNCHES_PER_COMMAND
    assert f"**attempt {last}**" in dump and f"attempt {last + 1}" not in dump, dump


def test_each_launch_of_a_line_has_its_own_output_and_the_logs_the_line_names():
    from ctxd.discovery import rules
    from ctxd.discovery.shellparse import parse_command

    facts = parse_command("./a > a.log 2>&1 & ./b > b.log & echo go | tee shared.log")
    launches = rules.launched(facts)
    assert rules.launch_logs(facts, launches, "/w") == [
        ["/w/a.log", "/w/shared.log"],
        ["/w/b.log", "/w/shared.log"],
    ]


def test_session_names_that_read_as_paths_or_devices_are_refused(client):
    for name in ("a..b", "a.", "con", "nul.txt", "com1", "lpt9.log"):
        answer = client.put(f"/api/sessions/{name}", json={})
        assert answer.status_code == 400, (name, answer.status_code, answer.text)
    for name in ("a.b", "console", "com10", "sglang-debug"):
        assert client.put(f"/api/sessions/{name}", json={}).status_code in (200, 201), name


def test_a_heredoc_is_never_flattened_into_one_runnable_line(client, tmp_path: Path):
    """`nohup python3 - <<'EOF' … EOF &` with `$(touch PWN)` in its quoted body: no line of the
    dump puts the body after the command (pasted, that line would run the `$(…)`); the
    command's own block keeps it as written, on lines of its own."""
    client.put("/api/sessions/doc", json={"cwd": str(tmp_path)})
    line = "nohup python3 - <<'EOF' > serve.log 2>&1 &\nnote = \"$(touch PWN)\"\nprint(note)\nEOF"
    action = {"kind": "command", "command": line, "cwd": str(tmp_path), "background": True}
    assert client.post("/api/sessions/doc/actions", json={"actions": [action]}).status_code < 300
    dump = client.get("/api/sessions/doc/resume").text
    assert "touch PWN" in dump  # shown as written, somewhere
    for shown in dump.splitlines():
        assert not ("<<" in shown and "touch PWN" in shown), shown
    assert "<<'EOF' > serve.log 2>&1 & …" in dump  # one-line mentions stop at the heredoc
