"""`ctxd serve` keeps its footprint small: one malloc arena for all its threads, and httpx's
command-line client (rich, pygments) never imported."""

import os
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import start_server, stop_server

HEAP_MAX = 64 * 2**20  # glibc's per-thread arena reservation on 64-bit systems


def thread_arenas(pid: int) -> int:
    """Reservations of glibc's thread arenas in `pid`: 64 MiB-aligned anonymous regions of
    64 MiB, a used (rw-p) head and an inaccessible (---p) rest."""
    regions = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        regions.append((start, end, fields[1], len(fields) > 5))
    count = 0
    for i, (start, end, perms, named) in enumerate(regions):
        if named or start % HEAP_MAX or perms != "rw-p":
            continue
        rest_start, rest_end, rest_perms, _ = regions[i + 1] if i + 1 < len(regions) else (0,) * 4
        whole = rest_end if rest_start == end and rest_perms == "---p" else end
        count += whole - start == HEAP_MAX
    return count


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc arenas are Linux's")
def test_threads_of_the_server_share_one_malloc_arena(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text("".join(f"line {i} of a log\n" for i in range(5000)))
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(200):
        (tree / f"f{i}.bin").write_bytes(os.urandom(2048))
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log")
    try:
        with server.client() as client:
            client.put("/api/sessions/s", json={"objective": "footprint"}).raise_for_status()
            watches = ({"kind": "log", "path": str(log)}, {"kind": "artifact", "path": str(tree)})
            for spec in watches:
                client.post("/api/sessions/s/watches", json=spec).raise_for_status()
            for _ in range(3):  # the collector threads and the default pool allocate
                client.post("/api/sessions/s/snapshots", json={"force": True}).raise_for_status()
            client.get("/api/sessions/s/snapshots").raise_for_status()
        assert thread_arenas(server.process.pid) == 0
    finally:
        stop_server(server)


def test_httpx_command_line_client_is_never_imported(tmp_path: Path) -> None:
    """The server imports httpx; with rich installed (Litestar needs it) httpx would import
    its CLI and pygments too. Python's import profile names every module the server imported."""
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        with server.client() as client:
            assert client.get("/api/sessions").status_code == 200
    finally:
        stop_server(server)
    imported = set(re.findall(r"\|\s+([\w.]+)$", server.log(), re.MULTILINE))
    assert "httpx" in imported and "ctxd.http.app" in imported
    assert not {name for name in imported if name.split(".")[0] in ("rich", "pygments")}
