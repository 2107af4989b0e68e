"""Symlinks swapped under a watch: what is read is what was checked (issue 18, item 1).

A flipping process keeps re-pointing links between a benign file and a root-only file outside
the watch roots with rename(); nothing of that file may reach anything ctxd stores or serves.
"""

import contextlib
import json
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ctxd.collectors import CollectContext, artifacts
from ctxd.collectors._fs import Outside, open_confined, stat_confined
from ctxd.models import ArtifactWatch, LogWatch, Watch
from ctxd.settings import Settings
from ctxd.store.database import Store

from tests.conftest import start_server, stop_server

CANARY = "CANARY-shadow-7f3a9c"
SECRET_SIZE = 123_457  # a size no benign file here has
SECRET_MTIME = 981_173_106  # 2001-02-03T04:05:06Z

FLIPPER = """
import os, sys, time
links, targets, until = sys.argv[1].split(","), sys.argv[2].split(","), float(sys.argv[3])
i = 0
while time.time() < until:
    for link in links:
        tmp = link + ".new"
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        os.symlink(targets[i % 2], tmp)
        os.rename(tmp, link)
    i += 1
"""


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(watched root, the root-only secret file outside it)."""
    root = tmp_path / "watched"
    root.mkdir()
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    secret = private / "shadow"
    body = "".join(f"{CANARY} line {i}\n" for i in range(10))
    secret.write_text(body + "x" * (SECRET_SIZE - len(body)))
    os.chmod(secret, 0o600)
    os.utime(secret, (SECRET_MTIME, SECRET_MTIME))
    (root / "benign.txt").write_text("".join(f"benign line {i}\n" for i in range(20)))
    yield root, secret


def expand(blob: bytes) -> bytes:
    """The bytes and every zlib stream inside them (the store compresses its sections)."""
    parts = [blob]
    start = blob.find(b"\x78\x9c")
    while start >= 0:
        with contextlib.suppress(zlib.error):
            parts.append(zlib.decompressobj().decompress(blob[start:]))
        start = blob.find(b"\x78\x9c", start + 1)
    return b"\n".join(parts)


def _versions(db: Path) -> list[str]:
    """Every stored version as JSON and Markdown, read through the store: a section kept as a
    delta (zlib with a preset dictionary) inflates only there."""
    store = Store(db)
    try:
        return [
            text
            for sid, version, _ in store.iter_versions()
            for text in (
                store.get_snapshot(sid, version).model_dump_json(),
                store.get_markdown(sid, version),
            )
        ]
    finally:
        store.close()


def _ctx(root: Path) -> CollectContext:
    return CollectContext(settings=Settings(watch_roots=[root]))


def _watch(spec: LogWatch | ArtifactWatch) -> Watch:
    return Watch(id=1, session="s", spec=spec, created_at=datetime.now(UTC))


def test_open_confined_refuses_a_link_out_of_the_roots(layout: tuple[Path, Path]) -> None:
    root, secret = layout
    (root / "r1.log").symlink_to(secret)
    with pytest.raises(Outside, match="outside the watch roots"):
        open_confined(str(root / "r1.log"), [root])
    with pytest.raises(Outside):
        stat_confined(str(root / "r1.log"), [root])
    (root / "ok.log").symlink_to(root / "benign.txt")  # a link inside the roots is fine
    fd, st = open_confined(str(root / "ok.log"), [root])
    os.close(fd)
    assert st.st_size == (root / "benign.txt").stat().st_size


def test_proc_is_refused_by_descriptor(layout: tuple[Path, Path]) -> None:
    with pytest.raises(Outside, match="never watched"):
        open_confined("/proc/self/status", [Path("/")])


def test_an_artifact_link_out_of_the_roots_shows_nothing_of_its_target(
    layout: tuple[Path, Path],
) -> None:
    root, secret = layout
    tree = root / "tree"
    tree.mkdir()
    (tree / "model.bin").write_bytes(b"m" * 10)
    (tree / "shadow").symlink_to(secret)
    (root / "single").symlink_to(secret)
    ctx = _ctx(root)
    dump = []
    for path in (tree, root / "single", root / "sin*"):
        section = artifacts.collect([_watch(ArtifactWatch(path=str(path)))], ctx)
        dump.append(section.model_dump_json())
    text = "\n".join(dump)
    assert f'"size":{SECRET_SIZE}' not in text
    assert "2001-02-03" not in text
    tree_info = json.loads(dump[0])["items"][0]
    assert tree_info["size"] == 10, tree_info


def test_flipping_links_never_store_the_root_only_file(
    layout: tuple[Path, Path], tmp_path: Path
) -> None:
    root, secret = layout
    logs_dir = root / "x"
    logs_dir.mkdir()
    links = [logs_dir / f"r{i}.log" for i in range(5)]
    for link in links:
        link.symlink_to(root / "benign.txt")
    data = tmp_path / "data"
    env = {"CTXD_WATCH_ROOTS": json.dumps([str(root), str(data)])}
    srv = start_server(data, tmp_path / "ctxd.log", env=env)
    flipper = None
    bodies: list[str] = []
    try:
        with srv.client() as c:
            assert c.put("/api/sessions/race", json={}).status_code == 201
            spec = {"kind": "log", "path": str(logs_dir / "r*.log"), "lines": 5, "files": 5}
            assert c.post("/api/sessions/race/watches", json=spec).status_code == 201, spec
            spec = {"kind": "artifact", "path": str(logs_dir)}
            assert c.post("/api/sessions/race/watches", json=spec).status_code == 201
            until = time.time() + 6
            flipper = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    FLIPPER,
                    ",".join(map(str, links)),
                    f"{root / 'benign.txt'},{secret}",
                    str(until),
                ]
            )
            taken = 0
            while time.time() < until:
                r = c.post("/api/sessions/race/snapshots", json={"force": True})
                assert r.status_code == 201, r.text
                bodies.append(r.text)
                taken += 1
            for path in ("snapshots", "resume?fresh=false", "journal"):
                bodies.append(c.get(f"/api/sessions/race/{path}").text)
            bodies.append(c.get("/sessions/race").text)
        assert taken >= 5
    finally:
        if flipper is not None:
            flipper.kill()
            flipper.wait()
        stop_server(srv)
    stored = [expand(p.read_bytes()) for p in data.rglob("*") if p.is_file()]
    stored += [text.encode() for text in _versions(data / "ctxd.db")]
    leaks = [b for b in stored if CANARY.encode() in b]
    leaks += [b for b in bodies if CANARY in b or f'"size":{SECRET_SIZE}' in b]
    assert leaks == [], f"{len(leaks)} stored or served item(s) hold the root-only file"
    assert CANARY not in srv.log()
