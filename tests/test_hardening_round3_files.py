"""Files ctxd opens because a request named them: FIFO transcripts, and peer token files that
must be ctxd's own (hardening round 3, findings 2 and 3)."""

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server, stop_server, wait_until

# Bounds on hangs, generous for a loaded machine: a hang would be forever, not 20 s.
ANSWER_S = 20.0
PROMPT = "Make the trainer stop running out of memory at step 400"


def transcript_line(text: str) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}})


@pytest.fixture
def projects(tmp_path: Path) -> Path:
    folder = tmp_path / "home" / ".claude" / "projects" / "-work-train"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def confined_server(tmp_path: Path) -> Iterator[Server]:
    """A real ctxd whose watch roots are this test's folder (so its transcripts are inside)."""
    env = {"CTXD_WATCH_ROOTS": json.dumps([str(tmp_path)])}
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        yield srv
    finally:
        stop_server(srv)


def prompt_event(cwd: Path, conversation: str, transcript: Path) -> dict:
    payload = {
        "session_id": conversation,
        "transcript_path": str(transcript),
        "cwd": str(cwd),
        "hook_event_name": "UserPromptSubmit",
        "prompt": "continue",
    }
    return {"payload": payload}


# --- finding 2: a FIFO as transcript_path -----------------------------------------------------


def test_eleven_fifo_transcripts_do_not_hang_the_server(
    confined_server: Server, projects: Path, tmp_path: Path
) -> None:
    fifos = []
    for i in range(11):
        fifo = projects / f"conversation-{i}.jsonl"
        os.mkfifo(fifo)  # never opened for writing: a blocking open() would wait forever
        fifos.append(fifo)
        (tmp_path / f"work{i}").mkdir()
    url = confined_server.url

    def post(i: int) -> tuple[int, dict]:
        body = prompt_event(tmp_path / f"work{i}", f"conv-{i}", fifos[i])
        with httpx.Client(timeout=ANSWER_S) as c:
            answer = c.post(f"{url}/api/hooks/claude", json=body)
            return answer.status_code, answer.json()

    with ThreadPoolExecutor(max_workers=11) as pool:
        hooks = [pool.submit(post, i) for i in range(11)]
        with httpx.Client(base_url=url, timeout=ANSWER_S) as c:
            # meanwhile the server answers everyone else
            assert c.get("/health").status_code == 200
            assert c.get("/api/sessions").status_code == 200
        answers = [h.result(timeout=2 * ANSWER_S) for h in hooks]

    assert [code for code, _ in answers] == [200] * 11, answers
    with httpx.Client(base_url=url, timeout=ANSWER_S) as c:
        for _, said in answers:
            session = c.get(f"/api/sessions/{said['session']}").json()
            assert session["objective"] == ""  # nothing was read from a FIFO
        assert c.get("/health").status_code == 200
        # a regular transcript beside the FIFOs: its objective is read
        (tmp_path / "work-real").mkdir()
        real = projects / "real.jsonl"
        real.write_text(transcript_line("continue") + "\n" + transcript_line(PROMPT) + "\n")
        body = prompt_event(tmp_path / "work-real", "conv-real", real)
        said = c.post("/api/hooks/claude", json=body).json()
        assert c.get(f"/api/sessions/{said['session']}").json()["objective"] == PROMPT


def run_bounded(work, timeout_s: float = ANSWER_S):  # type: ignore[no-untyped-def]
    """work() in a thread, its result or exception; a hang fails the test instead of the suite."""
    outcome: list = []

    def target() -> None:
        try:
            outcome.append(("ok", work()))
        except BaseException as exc:
            outcome.append(("raised", exc))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert outcome, f"still waiting after {timeout_s:g} s"
    return outcome[0]


def test_a_fifo_socket_or_device_is_refused_without_waiting(
    projects: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxd.discovery.objective import first_prompt_in_transcript
    from ctxd.named_files import NotRegular, open_named

    fifo = projects / "fifo.jsonl"
    os.mkfifo(fifo)
    monkeypatch.chdir(projects)  # a socket's name is bound relative: its path may be long
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("sock.jsonl")
    roots = [projects.parent.parent.parent]
    try:
        for path, what in (
            (fifo, "fifo"),
            (projects / "sock.jsonl", "socket"),
            (Path("/dev/zero"), "device"),
        ):
            kind, raised = run_bounded(lambda p=path: open_named(str(p)))
            assert kind == "raised" and isinstance(raised, NotRegular), (path, raised)
            assert str(raised) == f"not a regular file ({what})"
            for given in (None, roots):

                def read(p: Path = path, r: list[Path] | None = given) -> str | None:
                    return first_prompt_in_transcript(str(p), roots=r)

                assert run_bounded(read) == ("ok", None)
    finally:
        sock.close()


FLIPPER = """
import os, sys
target = sys.argv[1]
while True:
    os.mkfifo(target + ".fifo")
    os.rename(target + ".fifo", target)
    with open(target + ".reg", "w") as f:
        f.write("x")
    os.rename(target + ".reg", target)
"""
OPENS = 2000


def test_a_fifo_swapped_in_after_the_check_is_opened_without_waiting(tmp_path: Path) -> None:
    from ctxd.named_files import NotRegular, open_named

    target = tmp_path / "flips.jsonl"
    target.write_text("x")
    flipper = subprocess.Popen([sys.executable, "-c", FLIPPER, str(target)])
    seen: dict[str, int] = {}

    def open_while_flipping() -> None:
        for _ in range(OPENS):
            try:
                fd, st = open_named(str(target))
            except (OSError, NotRegular) as exc:
                seen[type(exc).__name__] = seen.get(type(exc).__name__, 0) + 1
                continue
            os.close(fd)
            assert stat.S_ISREG(st.st_mode)
            seen["regular"] = seen.get("regular", 0) + 1

    try:
        kind, value = run_bounded(open_while_flipping)
    finally:
        flipper.kill()
        flipper.wait()
    assert kind == "ok", value  # no open waited for a writer of a fifo
    assert sum(seen.values()) == OPENS


def test_the_transcript_read_is_the_file_its_name_names(projects: Path, tmp_path: Path) -> None:
    from ctxd.discovery.objective import first_prompt_in_transcript

    transcript = projects / "real.jsonl"
    transcript.write_text(transcript_line(PROMPT) + "\n")
    link = projects / "link.jsonl"
    link.symlink_to(transcript)
    assert first_prompt_in_transcript(str(transcript)) == PROMPT
    # a name with a link in it is not what is read: the caller checked the name, not its target
    assert first_prompt_in_transcript(str(link)) is None
    roots = [tmp_path]
    assert first_prompt_in_transcript(str(link), roots=roots) == PROMPT  # resolved, then checked
    assert first_prompt_in_transcript(str(transcript), roots=[tmp_path / "elsewhere"]) is None
    plain = tmp_path / "notes.jsonl"  # not under .claude/projects
    plain.write_text(transcript_line(PROMPT) + "\n")
    assert first_prompt_in_transcript(str(plain), roots=roots) is None
    away = projects / "away.jsonl"  # a link out of .claude/projects
    away.symlink_to(plain)
    assert first_prompt_in_transcript(str(away), roots=roots) is None
    for given in (None, roots):  # a NUL cannot name a file: no transcript, and no error
        assert first_prompt_in_transcript(f"{projects}/a\x00b.jsonl", roots=given) is None


def test_a_hung_read_is_given_up_at_its_time_and_bounded_in_threads() -> None:
    from ctxd.named_files import TimedReads, TooSlow

    reads = TimedReads("test file", slots=2)
    release = threading.Event()
    for _ in range(2):  # as a read on a hung filesystem: it never returns by itself
        with pytest.raises(TooSlow, match=r"longer than 0\.2 s"):
            reads.run(release.wait, 0.2)
    # refused at once, not after its time: ten minutes, which only the per-test timeout
    # would see out
    with pytest.raises(TooSlow, match="2 earlier reads of a test file still hang"):
        reads.run(lambda: "never run", 600)
    release.set()  # the hung reads return and give their slots back

    def read_again() -> bool:
        try:
            return reads.run(lambda: "read", ANSWER_S) == "read"
        except TooSlow:
            return False

    wait_until(read_again, "the slots given back")
    with pytest.raises(ZeroDivisionError):  # the work's own failure reaches the caller
        reads.run(lambda: 1 // 0, ANSWER_S)


# --- finding 3: a peer's token_file names another private file ---------------------------------

HF_TOKEN = "hf_" + "kQzT7pWmXv3RbN9sLcYd2HfJg5AeUo8Ki1"
GOOD_TOKEN = "good-peer-token-0123456789-abcdef"


class Listener:
    """A real socket on loopback that keeps every byte sent to it and answers like a peer's
    clock (so a request that does reach it looks successful)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.received = bytearray()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                conn.settimeout(5)
                data = bytearray()
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    body = json.dumps({"now": "2026-01-01T00:00:00+00:00", "hostname": "x"})
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                        + body.encode()
                    )
                except OSError:
                    pass
                with self.lock:
                    self.received += data

    def text(self) -> str:
        with self.lock:
            return self.received.decode("latin-1")

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def listener() -> Iterator[Listener]:
    one = Listener()
    try:
        yield one
    finally:
        one.close()


@pytest.fixture
def hf_secret(tmp_path: Path) -> Path:
    """A local user's private token, as `huggingface-cli login` leaves it: mode 0600."""
    path = tmp_path / "home" / ".cache" / "huggingface" / "token"
    path.parent.mkdir(parents=True)
    path.write_text(HF_TOKEN)
    path.chmod(0o600)
    return path


def put_peer(c: httpx.Client, name: str, url: str, token_file: Path | str) -> httpx.Response:
    return c.put(f"/api/peers/{name}", json={"url": url, "token_file": str(token_file)})


def test_a_private_token_file_is_never_sent_to_a_peer(
    confined_server: Server, listener: Listener, hf_secret: Path, tmp_path: Path
) -> None:
    from ctxd.store.connection import Connection
    from ctxd.store.peers import PeerIn, PeerRows

    folder = confined_server.data_dir / ".peers"  # where ctxd takes token files
    folder.mkdir(mode=0o700, exist_ok=True)  # ctxd makes it at start (checked below)
    link = folder / "evil.token"
    link.symlink_to(hf_secret)  # a link to a 0600 file, inside the right folder
    hard = folder / "hard.token"
    os.link(hf_secret, hard)  # a second name for the private file itself
    with confined_server.client() as c:
        for named in (hf_secret, link, hard):
            refused = put_peer(c, "evil", listener.url, named)
            assert refused.status_code == 400, refused.text
            assert "not accepted as a token file" in refused.text
            assert "hf_" not in refused.text
        assert c.get("/api/peers").json() == []
        # a peer stored before this rule, or by hand: its file is checked again at each use
        conn = Connection(confined_server.data_dir / "ctxd.db")
        try:
            PeerRows(conn).put("evil", PeerIn(url=listener.url, token_file=str(hf_secret)))
        finally:
            conn.close()
        (status,) = c.get("/api/peers").json()
        assert status["reachable"] is False
        assert status["error"].startswith("its token file is not accepted as a token file")
        (tmp_path / "x.log").write_text("a line\n")
        assert c.put("/api/sessions/s", json={}).status_code == 201
        spec = {"kind": "log", "path": str(tmp_path / "x.log"), "host": "evil"}
        assert c.post("/api/sessions/s/watches", json=spec).status_code == 201
        snapshot = c.post("/api/sessions/s/snapshots", json={"force": True})
        assert snapshot.status_code == 201 and "not accepted as a token file" in snapshot.text
        assert listener.text() == ""  # not even a connection carried a request
        # the listener works: a token file of ctxd's own is sent, and only that
        good = private(folder / "good.token", GOOD_TOKEN.encode() + b"\n")
        assert put_peer(c, "good", listener.url, good).status_code == 201
        statuses = {s["name"]: s for s in c.get("/api/peers").json()}
        assert statuses["good"]["reachable"] is True, statuses
    heard = listener.text()
    assert f"Authorization: Bearer {GOOD_TOKEN}".lower() in heard.lower()
    assert "hf_" not in heard and HF_TOKEN not in heard
    assert HF_TOKEN not in confined_server.log()


def private(path: Path, content: bytes) -> Path:
    """A file of mode 0600 holding `content`: only what the case changes breaks the rule."""
    path.write_bytes(content)
    path.chmod(0o600)
    return path


def test_every_refused_token_file_gets_the_same_words(
    confined_server: Server, listener: Listener, hf_secret: Path
) -> None:
    folder = confined_server.data_dir / ".peers"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # made at start, private
    good = private(folder / "good.token", GOOD_TOKEN.encode() + b"\n")
    (folder / "sub").mkdir()
    cases = {
        "missing": folder / "missing.token",
        "empty": private(folder / "empty.token", b""),
        "binary": private(folder / "binary.token", b"\xef\xbb\xbf\x00\xff" + GOOD_TOKEN.encode()),
        "two lines": private(folder / "two.token", GOOD_TOKEN.encode() + b"\nsecond line\n"),
        "readable by others": private(folder / "loose.token", GOOD_TOKEN.encode()),
        "a folder": folder / "sub",
        "in a subfolder": private(folder / "sub" / "good.token", GOOD_TOKEN.encode()),
        "link to a good one": folder / "link.token",
        "outside the folders": hf_secret,
        "relative": Path("good.token"),
        "fifo": folder / "fifo.token",
        "a NUL in the name": folder / "a\x00b.token",
    }
    cases["readable by others"].chmod(0o644)
    cases["link to a good one"].symlink_to(good)
    os.mkfifo(cases["fifo"])  # no writer, ever: the request must not wait for one
    if os.geteuid() == 0:
        cases["someone else's"] = private(folder / "theirs.token", GOOD_TOKEN.encode())
        os.chown(cases["someone else's"], 65534, 65534)

    details = {}
    with confined_server.client() as c:
        for case, path in cases.items():
            answer = put_peer(c, "node2", listener.url, path)
            assert answer.status_code == 400, (case, answer.text)
            details[case] = answer.json()["detail"]
        assert put_peer(c, "node2", listener.url, good).status_code == 201  # the rule can be met
        assert c.get("/health").status_code == 200

    assert len(set(details.values())) == 1, details
    words = details["missing"]
    assert words.startswith("token_file not accepted as a token file: it must be")
    assert "mode 0600 or stricter" in words and str(folder) in words
    for hint in ("No such file", "exist", "empty", "ASCII", "does not hold", "fifo", "hf_"):
        assert hint not in words
    assert HF_TOKEN not in listener.text()


def test_a_token_file_in_ctxds_config_folder_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxd.peers.client import PeerFailure, read_token, token_folders, token_rule

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    folders = token_folders(tmp_path / "data")
    assert folders == [tmp_path / "data" / ".peers", tmp_path / "config" / "ctxd"]
    (tmp_path / "config" / "ctxd").mkdir(parents=True)
    path = private(tmp_path / "config" / "ctxd" / "node2.token", GOOD_TOKEN.encode() + b"\n")
    assert read_token(str(path), folders) == GOOD_TOKEN
    dotfiles = tmp_path / "dotfiles"  # the folder itself may be named through a link
    dotfiles.symlink_to(tmp_path / "config" / "ctxd")
    assert read_token(str(dotfiles / "node2.token"), folders) == GOOD_TOKEN
    path.write_bytes(b"\xef\xbb\xbf" + GOOD_TOKEN.encode())  # changed after it was put
    with pytest.raises(PeerFailure) as refused:
        read_token(str(path), folders)
    assert (
        str(refused.value)
        == f"its token file is not accepted as a token file: {token_rule(folders)}"
    )
