"""Peers on loopback: two real ctxd servers, and tiny real HTTP servers that misbehave."""

import http.server
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import httpx
import pytest
from ctxd.peers.client import REFUSED, token_folders, token_rule

from tests.conftest import Server, StepClock, start_server, stop_server

if TYPE_CHECKING:
    from ctxd.models import Watch
    from ctxd.peers.fanout import Peers

TOKEN = "peer-token-0123456789-abcdefghij"

# A bound for waiting on a request that must end on its own (its deadline is 2 s): generous,
# a busy machine is no failure; the deadline itself is shown by the peer still holding the
# request when the snapshot is back, not by a clock.
HANG_S = 60


def token_file(data_dir: Path, token: str = TOKEN, name: str = "peer.token") -> Path:
    """A token file where ctxd accepts one: in its data directory's `.peers` folder."""
    folder = data_dir / ".peers"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / name
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def node2(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "node2", tmp_path / "node2.log", env={"CTXD_TOKEN": TOKEN})
    try:
        yield srv
    finally:
        stop_server(srv)


def take(client: httpx.Client, sid: str) -> tuple[dict, str, float]:
    """A stored snapshot (JSON, Markdown) and how long it took, seen from the client (printed
    by tests that report it; never asserted: bench/ measures speed)."""
    started = time.monotonic()
    answer = client.post(f"/api/sessions/{sid}/snapshots", json={"force": True})
    took = time.monotonic() - started
    assert answer.status_code == 201, answer.text
    version = answer.json()["header"]["version"]
    markdown = client.get(f"/api/sessions/{sid}/snapshots/{version}/markdown").text
    return answer.json(), markdown, took


def session_with_logs(client: httpx.Client, tmp_path: Path, peer: str) -> None:
    """A session with one log here and one on `peer`, both with a line to show."""
    (tmp_path / "here.log").write_text("local line one\n")
    (tmp_path / "there.log").write_text("remote line one\n")
    assert client.put("/api/sessions/s", json={"title": "two hosts"}).status_code == 201
    for path, host in ((tmp_path / "here.log", None), (tmp_path / "there.log", peer)):
        spec = {"kind": "log", "path": str(path), "lines": 5} | ({"host": host} if host else {})
        answer = client.post("/api/sessions/s/watches", json=spec)
        assert answer.status_code == 201, answer.text


def test_a_peer_watch_is_collected_there_and_named_by_host(
    client: httpx.Client, node2: Server, tmp_path: Path
) -> None:
    peer = {"url": node2.url, "token_file": str(token_file(tmp_path / "data"))}
    assert client.put("/api/peers/node2", json=peer).status_code == 201
    session_with_logs(client, tmp_path, "node2")
    (tmp_path / "there.log").write_text("remote line one\nAKIAIOSFODNN7EXAMPLE key\n")

    snapshot, markdown, _ = take(client, "s")

    logs = {item["path"]: item for item in snapshot["observations"]["logs"]["items"]}
    remote = logs[f"node2:{tmp_path / 'there.log'}"]
    assert remote["host"] == "node2" and "remote line one" in remote["lines"]
    assert logs[str(tmp_path / "here.log")]["host"] is None
    assert "AKIAIOSFODNN7EXAMPLE" not in markdown  # redacted by the peer, and here again
    assert f"### node2:{tmp_path / 'there.log'}" in markdown
    assert "unavailable" not in markdown
    # the Host section names this host and the peer that answered, with its own facts
    assert " (this host): " in markdown and "- peer `node2` (`" in markdown

    status = client.get("/api/peers").json()
    assert status[0]["name"] == "node2" and status[0]["reachable"] is True
    # the same clock, on one machine: its reading falls within the request, so the offset is
    # at most half the round trip (and the 1 ms of rounding), however slow the machine
    assert abs(status[0]["clock_offset_s"]) <= status[0]["latency_ms"] / 2000 + 0.002
    assert status[0]["warning"] is None  # http:// on loopback stays on this machine


def test_remote_processes_and_jobs_are_named_by_host(
    client: httpx.Client, node2: Server, tmp_path: Path, spawn
) -> None:
    spawn("sleep", "4321.5")
    client.put(
        "/api/peers/node2",
        json={"url": node2.url, "token_file": str(token_file(tmp_path / "data"))},
    )
    client.put("/api/sessions/s", json={})
    watch = {"kind": "process", "match": "^sleep 4321[.]5$", "host": "node2"}
    assert client.post("/api/sessions/s/watches", json=watch).status_code == 201

    snapshot, markdown, _ = take(client, "s")

    (proc,) = snapshot["observations"]["processes"]["items"]
    assert proc["name"] == "node2:sleep" and proc["host"] == "node2"
    assert "| node2:sleep |" in markdown
    proc_gone = snapshot["observations"]["processes"]["unavailable"]
    assert proc_gone == []


def test_a_remote_port_is_probed_on_the_peers_loopback(
    client: httpx.Client, node2: Server, tmp_path: Path
) -> None:
    peer = {"url": node2.url, "token_file": str(token_file(tmp_path / "data"))}
    client.put("/api/peers/node2", json=peer)
    client.put("/api/sessions/s", json={})
    node2_port = int(node2.url.rsplit(":", 1)[1])
    watch = {"kind": "port", "port": node2_port, "host": "node2"}
    assert client.post("/api/sessions/s/watches", json=watch).status_code == 201

    snapshot, markdown, _ = take(client, "s")

    (port,) = snapshot["observations"]["ports"]["items"]
    assert port["host"] == "node2" and port["listening"] is True
    assert f"| node2:{node2_port} | yes |" in markdown


@pytest.mark.parametrize(
    ("token", "expected"),
    [("wrong-token-0123456789-abcdefghij", "refused our token (HTTP 401)")],
)
def test_a_wrong_token_is_one_clear_line(
    client: httpx.Client, node2: Server, tmp_path: Path, token: str, expected: str
) -> None:
    peer = {"url": node2.url, "token_file": str(token_file(tmp_path / "data", token))}
    client.put("/api/peers/node2", json=peer)
    session_with_logs(client, tmp_path, "node2")

    _, markdown, _ = take(client, "s")

    assert f"- unavailable: `host node2`: log {tmp_path / 'there.log'}: {expected}" in markdown
    assert "local line one" in markdown  # the rest of the dump is whole
    status = client.get("/api/peers").json()
    assert status[0]["reachable"] is False and "401" in status[0]["error"]


class Misbehaving(http.server.BaseHTTPRequestHandler):
    """Answers every request the way the server's `mode` says, and counts them."""

    def do_POST(self) -> None:
        server = self.server
        server.requests += 1  # type: ignore[attr-defined]
        # the request is read first: closing a socket with unread bytes in it sends a reset,
        # which could reach ctxd before the answer and read as a broken connection
        self.rfile.read(int(self.headers.get("content-length") or 0))
        mode = server.mode  # type: ignore[attr-defined]
        if mode == "slow":  # holds the request until the test lets go (at its end)
            server.release.wait(120)  # type: ignore[attr-defined]
            server.answered += 1  # type: ignore[attr-defined]
            return
        if mode == "refuses":  # as ctxd's access check refuses a Host it does not know
            body = b'{"status_code": 403, "detail": "Host \'10.0.0.2\' is not allowed"}'
            self.send_response(403)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("content-type", "application/json")
        if mode == "drip":  # each read within the deadline, the whole answer well past it
            self.end_headers()
            try:
                for _ in range(4):
                    time.sleep(1.5)
                    self.wfile.write(b" ")
                    self.wfile.flush()
            except OSError:
                pass
            return
        if mode == "garbage":
            body = b"\x00\xffthis is not json at all" * 10
        elif mode == "huge":
            body = b'{"processes": {"items": []}, "pad": "' + b"x" * (10 * 2**20) + b'"}'
        elif mode == "deep":  # within the size cap, too deep for the JSON decoder
            body = b"[" * 200_000
        elif mode == "huge-undeclared":  # no content-length: cut while reading
            self.end_headers()
            for _ in range(160):
                self.wfile.write(b"x" * 65536)
            return
        else:  # "wrong-json": valid JSON, not observations
            body = b'{"processes": {"items": [{"pid": "not a number"}]}}'
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_peer() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Misbehaving)
    server.daemon_threads = True
    server.mode = "garbage"  # type: ignore[attr-defined]
    server.requests = 0  # type: ignore[attr-defined]
    server.answered = 0  # type: ignore[attr-defined]
    server.release = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("garbage", "answered 250 B that are not JSON"),
        ("huge", "answer of 10.0 MiB is over the limit"),
        ("huge-undeclared", "answer is over the limit of 4.0 MiB"),
        ("wrong-json", "answered JSON that is not ctxd's observations"),
        ("deep", "answered JSON nested too deep"),
        ("slow", "no answer within 2 s"),
        ("refuses", "answered HTTP 403: Host '10.0.0.2' is not allowed"),
    ],
)
def test_a_misbehaving_peer_is_one_line_within_the_deadline(
    client: httpx.Client,
    fake_peer: http.server.ThreadingHTTPServer,
    tmp_path: Path,
    mode: str,
    expected: str,
) -> None:
    fake_peer.mode = mode  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{fake_peer.server_address[1]}"
    client.put(
        "/api/peers/node2", json={"url": url, "token_file": str(token_file(tmp_path / "data"))}
    )
    session_with_logs(client, tmp_path, "node2")

    _, markdown, _ = take(client, "s")

    lines = [line for line in markdown.splitlines() if "host node2" in line]  # shown on failure
    assert f"- unavailable: `host node2`: log {tmp_path / 'there.log'}: {expected}" in lines
    assert f"- unavailable: `host node2`: GPUs: {expected}" in lines
    assert "local line one" in markdown
    if mode == "slow":  # the snapshot is back while the peer still holds the request
        assert fake_peer.requests >= 1 and fake_peer.answered == 0  # type: ignore[attr-defined]


def test_a_failed_peer_rests_instead_of_being_asked_each_time(
    fake_peer: http.server.ThreadingHTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rest is kept on the peer directory's clock, stepped here: five snapshots fall
    # within the first rest (3 s) however long a busy machine takes for them.
    from ctxd.models import Observations
    from ctxd.peers import fanout

    # starts at the real clock: the request's own deadline, read by the client, is on that
    clock = StepClock(time.monotonic())
    monkeypatch.setattr(fanout, "time", SimpleNamespace(monotonic=clock, time=time.time))

    with peers_of(tmp_path, fake_peer, peer_backoff_min_s=3) as peers:

        def snapshot() -> str:
            into = Observations()
            peers.merge(peers.ask("s", "snapshot", {"node2": [log_watch(tmp_path)]}, None), into)
            return into.logs.unavailable[0].reason

        reasons = []
        for _ in range(5):
            reasons.append(snapshot())
            clock.advance(0.5)

        assert fake_peer.requests == 1  # type: ignore[attr-defined]  # 3 s of rest, then 6 s, ...
        assert reasons[0].endswith("answered 250 B that are not JSON")
        assert reasons[-1].endswith("(resting before the next try)")
        clock.advance(0.6)  # 3.1 s after the failure
        snapshot()
        assert fake_peer.requests == 2  # type: ignore[attr-defined]
        clock.advance(5.9)  # the second rest is 6 s: 5.9 s on, still resting
        assert snapshot().endswith("(resting before the next try)")
        assert fake_peer.requests == 2  # type: ignore[attr-defined]
        clock.advance(0.2)
        snapshot()
        assert fake_peer.requests == 3  # type: ignore[attr-defined]


def test_an_unreadable_token_is_a_line_and_a_rest_not_a_failed_snapshot(
    client: httpx.Client, fake_peer: http.server.ThreadingHTTPServer, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{fake_peer.server_address[1]}"
    path = token_file(tmp_path / "data")
    assert client.put("/api/peers/node2", json={"url": url, "token_file": str(path)}).is_success
    session_with_logs(client, tmp_path, "node2")
    # an editor saved it again with a byte-order mark: no HTTP header can carry that
    path.write_bytes(b"\xef\xbb\xbf" + TOKEN.encode() + b"\n")

    first, second = take(client, "s")[1], take(client, "s")[1]

    why = "its token file is " + REFUSED + ": " + token_rule(token_folders(tmp_path / "data"))
    assert f"`host node2`: log {tmp_path / 'there.log'}: {why}" in first
    assert "local line one" in first
    assert f"{why} (resting before the next try)" in second
    assert fake_peer.requests == 0  # type: ignore[attr-defined]
    status = client.get("/api/peers").json()
    assert status[0]["reachable"] is False and status[0]["error"] == why
    refused = client.put("/api/peers/node3", json={"url": url, "token_file": str(path)})
    assert refused.status_code == 400 and REFUSED in refused.text and TOKEN not in refused.text


def test_an_unforeseen_failure_is_one_line_naming_its_kind(
    client: httpx.Client, tmp_path: Path
) -> None:
    # "a:b" passes the URL check, and httpx refuses it with an error that is no HTTPError
    peer = {"url": "http://a:b", "token_file": str(token_file(tmp_path / "data"))}
    assert client.put("/api/peers/node2", json=peer).status_code == 201
    session_with_logs(client, tmp_path, "node2")

    _, markdown, _ = take(client, "s")

    assert "`host node2`: log" in markdown and "failed unexpectedly (InvalidURL)" in markdown
    assert "local line one" in markdown
    status = client.get("/api/peers")
    assert status.status_code == 200 and status.json()[0]["reachable"] is False


@contextmanager
def peers_of(
    tmp_path: Path, fake_peer: http.server.ThreadingHTTPServer, **settings: object
) -> Iterator["Peers"]:
    """This host's peer directory, in-process, with `fake_peer` as node2."""
    from ctxd.peers.fanout import Peers
    from ctxd.settings import Settings
    from ctxd.store.connection import Connection
    from ctxd.store.peers import PeerIn

    configured = Settings(data_dir=tmp_path, **settings)  # type: ignore[arg-type]
    peers = Peers(configured, Connection(configured.db_path))
    url = f"http://127.0.0.1:{fake_peer.server_address[1]}"
    peers.put("node2", PeerIn(url=url, token_file=str(token_file(tmp_path))))
    try:
        yield peers
    finally:
        peers.close()


def log_watch(tmp_path: Path) -> "Watch":
    from ctxd.models import LogWatch, Watch

    spec = LogWatch(kind="log", path=str(tmp_path / "x.log"))
    return Watch(id=1, session="s", spec=spec, created_at="2026-01-01T00:00:00Z")  # type: ignore[arg-type]


def test_a_request_past_the_deadline_fails_once_not_twice(
    fake_peer: http.server.ThreadingHTTPServer, tmp_path: Path
) -> None:
    from ctxd.models import Observations
    from ctxd.peers.client import PeerFailure

    fake_peer.mode = "drip"  # type: ignore[attr-defined]
    with peers_of(tmp_path, fake_peer) as peers:
        asked = peers.ask("s", "snapshot", {"node2": [log_watch(tmp_path)]}, None)
        into = Observations()
        peers.merge(asked, into)  # gives up at the deadline: the request is still reading
        assert "no answer within 2 s" in into.logs.unavailable[0].reason
        with pytest.raises(PeerFailure):  # then the request fails on its own
            asked.futures["node2"].result(timeout=HANG_S)

        assert peers._health["node2"].failures == 1  # so the first rest is the first rest


def test_a_peer_remembers_a_bounded_number_of_requests(
    fake_peer: http.server.ThreadingHTTPServer, tmp_path: Path
) -> None:
    from ctxd.peers.fanout import BUSY_MAX

    fake_peer.mode = "wrong-json"  # type: ignore[attr-defined]
    with peers_of(tmp_path, fake_peer, peer_backoff_min_s=0) as peers:
        for n in range(BUSY_MAX + 20):
            peers.ask(f"s{n}", "snapshot", {"node2": []}, None).futures["node2"].exception()
        busy = peers._health["node2"].busy
        assert len(busy) <= BUSY_MAX and ("s83", "snapshot") in busy


@pytest.mark.parametrize(("only", "gpus"), [(None, True), (frozenset({"logs", "ports"}), False)])
def test_a_failed_peers_gpus_are_named_only_when_asked_for(
    fake_peer: http.server.ThreadingHTTPServer,
    tmp_path: Path,
    only: frozenset[str] | None,
    gpus: bool,
) -> None:
    from ctxd.models import Observations

    with peers_of(tmp_path, fake_peer) as peers:
        into = Observations()
        peers.merge(peers.ask("s", "probe", {"node2": [log_watch(tmp_path)]}, only), into)

    (line,) = into.logs.unavailable
    assert line.reason.endswith("answered 250 B that are not JSON")
    assert [u.reason for u in into.gpus.unavailable] == (
        ["GPUs: answered 250 B that are not JSON"] if gpus else []
    )


def test_the_peer_side_keeps_memory_for_a_bounded_number_of_callers(tmp_path: Path) -> None:
    from ctxd.collectors import registry
    from ctxd.peers.serve import CALLERS_MAX, Callers, ObserveIn, observe
    from ctxd.settings import Settings
    from ctxd.snapshotter.runner import CollectorRunner

    runner = CollectorRunner(Settings(data_dir=tmp_path), registry, peers=None)
    callers = Callers()
    try:
        for n in range(CALLERS_MAX + 10):
            ask = ObserveIn(session=f"caller{n}", only=["processes"])
            observe(runner, ask, callers, lambda spec: spec)
        kept = {key.split(":", 1)[1] for key in runner._memory}
        assert len(kept) == CALLERS_MAX
        assert "peer/caller0" not in kept and f"peer/caller{CALLERS_MAX + 9}" in kept
    finally:
        runner.close()


def test_a_dead_peer_is_unreachable_at_once(client: httpx.Client, tmp_path: Path) -> None:
    from tests.conftest import free_port

    url = f"http://127.0.0.1:{free_port()}"
    client.put(
        "/api/peers/node2", json={"url": url, "token_file": str(token_file(tmp_path / "data"))}
    )
    session_with_logs(client, tmp_path, "node2")

    _, markdown, _ = take(client, "s")

    # refused, not waited out: a deadline's words would be "no connection within 2 s"
    assert "`host node2`: log" in markdown and "unreachable: Connection refused" in markdown


def test_an_unknown_host_is_named(client: httpx.Client, tmp_path: Path) -> None:
    session_with_logs(client, tmp_path, "node9")

    _, markdown, _ = take(client, "s")

    assert "no such peer (PUT /api/peers/node9 adds it)" in markdown
    assert "local line one" in markdown


def test_the_peer_side_keeps_its_own_rules(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    env = {"CTXD_TOKEN": TOKEN, "CTXD_WATCH_ROOTS": f'["{allowed}"]'}
    node2 = start_server(tmp_path / "n2", tmp_path / "n2.log", env=env)
    open_node = start_server(tmp_path / "n3", tmp_path / "n3.log")
    try:
        outside = {"id": 1, "session": "s", "created_at": "2026-01-01T00:00:00Z"}
        outside["spec"] = {"kind": "log", "path": str(tmp_path / "x.log")}  # type: ignore[assignment]
        ask = {"session": "s", "watches": [outside]}
        headers = {"Authorization": f"Bearer {TOKEN}"}
        answer = httpx.post(f"{node2.url}/api/peer/observe", json=ask, headers=headers)
        assert answer.status_code == 200, answer.text
        (line,) = answer.json()["logs"]["unavailable"]
        assert line["reason"].startswith("refused by that host:")
        assert httpx.post(f"{node2.url}/api/peer/observe", json=ask).status_code == 401
        # a ctxd without a token serves no peer, even on loopback
        refused = httpx.post(f"{open_node.url}/api/peer/observe", json=ask)
        assert refused.status_code == 403 and "no token" in refused.text
    finally:
        stop_server(node2)
        stop_server(open_node)


def test_the_directory(client: httpx.Client, tmp_path: Path) -> None:
    good = {"url": "http://10.0.0.2:8765", "token_file": str(token_file(tmp_path / "data"))}
    assert client.put("/api/peers/node2", json=good).status_code == 201
    assert client.put("/api/peers/node2", json=good).status_code == 200
    missing = good | {"token_file": str(tmp_path / "nope")}
    answer = client.put("/api/peers/node3", json=missing)
    assert answer.status_code == 400 and REFUSED in answer.text
    assert client.put("/api/peers/node3", json=good | {"url": "ftp://x"}).status_code == 400
    relative = client.put("/api/peers/node3", json=good | {"token_file": "peer.token"})
    assert relative.status_code == 400 and REFUSED in relative.text
    Path(good["token_file"]).chmod(0o644)
    loose = client.put("/api/peers/node3", json=good)
    assert loose.status_code == 400 and "mode 0600 or stricter" in loose.text
    assert client.put("/api/peers/bad name", json=good).status_code == 400
    assert client.delete("/api/peers/node2").status_code == 204
    assert client.delete("/api/peers/node2").status_code == 404
    assert client.get("/api/peers").json() == []


PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END"


def test_only_a_token_is_ever_sent_from_a_token_file(
    client: httpx.Client, fake_peer: http.server.ThreadingHTTPServer, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{fake_peer.server_address[1]}"
    path = token_file(tmp_path / "data")
    for content in (PRIVATE_KEY, TOKEN + "\nsecond line\n", "short\n", f" {TOKEN}\n"):
        path.write_text(content)
        refused = client.put("/api/peers/node2", json={"url": url, "token_file": str(path)})
        assert refused.status_code == 400 and "holding one token alone" in refused.text
        assert "b3BlbnNzaC1rZXkt" not in refused.text and "second line" not in refused.text
    # put while it held a token, changed since: refused at use, never sent
    path.write_text(TOKEN + "\n")
    assert client.put("/api/peers/node2", json={"url": url, "token_file": str(path)}).is_success
    session_with_logs(client, tmp_path, "node2")
    path.write_text(PRIVATE_KEY)

    _, markdown, _ = take(client, "s")

    assert "`host node2`: log" in markdown and "holding one token alone" in markdown
    assert "b3BlbnNzaC1rZXkt" not in markdown
    status = client.get("/api/peers").json()
    assert "holding one token alone" in status[0]["error"]
    assert fake_peer.requests == 0  # type: ignore[attr-defined]


def test_a_token_sent_in_clear_to_another_host_is_warned_of(
    client: httpx.Client, tmp_path: Path
) -> None:
    peer = {"url": "http://node2.invalid:8765", "token_file": str(token_file(tmp_path / "data"))}
    assert client.put("/api/peers/node2", json=peer).status_code == 201
    assert client.put("/api/peers/node3", json=peer | {"url": "https://node3.invalid"}).is_success

    node2, node3 = client.get("/api/peers").json()

    assert node2["warning"] == (
        "http:// sends the token in clear to another host: use https:// or a tunnel"
    )
    assert node3["warning"] is None


def test_without_a_token_only_this_machine_names_peers(tmp_path: Path) -> None:
    from tests.conftest import app_client

    # the in-process client's address is "testclient": not this machine's loopback
    peer = {"url": "http://127.0.0.1:1", "token_file": str(token_file(tmp_path / "locked"))}
    with app_client(tmp_path / "open") as open_node:
        refused = open_node.put("/api/peers/node2", json=peer)
        assert refused.status_code == 403 and "from this machine only" in refused.text
        assert open_node.get("/api/peers").json() == []
    with app_client(tmp_path / "locked", token=TOKEN) as locked:
        locked.headers["Authorization"] = f"Bearer {TOKEN}"
        assert locked.put("/api/peers/node2", json=peer).status_code == 201
