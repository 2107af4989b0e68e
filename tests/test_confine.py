"""Watch paths confined to roots: `..`, symlinks, /proc and /sys refused; ids cannot traverse."""

import os
from pathlib import Path

import httpx
import pytest
from ctxd import confine
from ctxd.errors import Invalid, Refused
from ctxd.models import ArtifactWatch, CommandWatch, LogWatch
from ctxd.settings import Settings


@pytest.fixture
def root(tmp_path: Path) -> Path:
    inside = tmp_path / "root"
    (inside / "logs").mkdir(parents=True)
    (inside / "logs" / "a.log").write_text("x\n")
    return inside


def test_paths_under_a_root_pass(root: Path) -> None:
    for path in ("logs/a.log", "logs/*.log", "logs/../logs/a.log", "missing/later.log", "**/*.whl"):
        confine.check_path(str(root / path), [root])
    confine.check_path(str(root), [root])


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "../outside.log", "logs/../../outside.log", "logs/*/../../../etc/x"],
)
def test_escapes_are_refused(root: Path, path: str) -> None:
    with pytest.raises(Refused, match="outside the watch roots"):
        confine.check_path(str(root / path) if not path.startswith("/") else path, [root])


def test_a_root_that_is_a_prefix_of_another_name_does_not_cover_it(root: Path) -> None:
    sibling = root.parent / (root.name + "-evil")
    sibling.mkdir()
    with pytest.raises(Refused):
        confine.check_path(str(sibling / "x.log"), [root])


def test_symlink_escape_is_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.log").write_text("s\n")
    (root / "link").symlink_to(outside)
    with pytest.raises(Refused, match="outside the watch roots"):
        confine.check_path(str(root / "link" / "secret.log"), [root])
    with pytest.raises(Refused):
        confine.check_path(str(root / "link" / "*.log"), [root])
    assert not confine.allowed(str(root / "link" / "secret.log"), [root])
    assert confine.allowed(str(root / "logs" / "a.log"), [root])


def test_a_path_resolved_by_the_caller_is_judged_as_resolved(root: Path, tmp_path: Path) -> None:
    # a collector that resolved a log's path to open it passes that real path along instead
    # of resolving it again: the real path given is the one judged, beside the path as named
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    escaping = str(root / "link" / "secret.log")
    assert not confine.allowed(escaping, [root], os.path.realpath(escaping))
    inside = str(root / "logs" / "a.log")
    assert confine.allowed(inside, [root], os.path.realpath(inside))
    assert not confine.allowed(inside, [root], "/etc/passwd")
    assert not confine.allowed(str(root / ".." / "x.log"), [root], inside)  # `..` as named


def test_symlink_inside_the_root_is_fine(root: Path) -> None:
    (root / "current").symlink_to(root / "logs")
    confine.check_path(str(root / "current" / "a.log"), [root])


@pytest.mark.parametrize(
    "path", ["/proc/1/environ", "/proc/self/cmdline", "/sys/kernel", "/dev/mem"]
)
def test_pseudo_filesystems_are_refused_even_under_a_root(path: str) -> None:
    with pytest.raises(Refused, match="never watched"):
        confine.check_path(path, [Path("/")])


def test_symlink_into_proc_is_refused(root: Path) -> None:
    (root / "env").symlink_to("/proc/self/environ")
    with pytest.raises(Refused, match="never watched"):
        confine.check_path(str(root / "env"), [Path("/")])


def test_nul_is_invalid(root: Path) -> None:
    with pytest.raises(Invalid, match="NUL"):
        confine.check_path(str(root / "a\x00b"), [root])


def test_default_roots_are_home_tmp_and_cwd() -> None:
    roots = confine.roots(Settings())
    for expected in (Path.home(), Path("/tmp"), Path.cwd()):
        assert Path(os.path.realpath(expected)) in roots


def test_within_roots_covers_log_artifact_and_command_cwd(root: Path) -> None:
    settings = Settings(watch_roots=[root])
    confine.within_roots(LogWatch(path=str(root / "logs" / "a.log")), settings)
    for spec in (
        LogWatch(path="/etc/hosts"),
        ArtifactWatch(path="/etc/*.conf"),
        CommandWatch(name="git-status", cwd="/etc"),
    ):
        with pytest.raises(Refused):
            confine.within_roots(spec, settings)


# --- through the API --------------------------------------------------------------------------


def test_api_refuses_watches_outside_the_roots(client: httpx.Client, tmp_path: Path) -> None:
    assert client.put("/api/sessions/conf", json={}).status_code == 201
    url = "/api/sessions/conf/watches"
    ok = client.post(url, json={"kind": "log", "path": str(tmp_path / "fine.log")})
    assert ok.status_code == 201, ok.text
    outside = "resolves outside the watch roots"
    for spec, why in (
        ({"kind": "log", "path": "/proc/self/environ"}, "/proc is never watched"),
        ({"kind": "log", "path": "/sys/class/net/lo/address"}, "/sys is never watched"),
        ({"kind": "artifact", "path": "/etc/passwd"}, outside),
        ({"kind": "log", "path": str(tmp_path) + "/.." * 8 + "/etc/shadow"}, outside),
    ):
        r = client.post(url, json=spec)
        assert r.status_code == 403, (spec, r.text)
        assert why in r.json()["detail"], (spec, r.text)
    link = tmp_path / "to-etc"
    link.symlink_to("/etc")
    r = client.post(url, json={"kind": "log", "path": str(link / "hostname")})
    assert r.status_code == 403, r.text
    r = client.post(url, json={"kind": "log", "path": str(tmp_path / "a\x00b")})
    assert r.status_code == 400, r.text


# Each with the one answer it gets: no such session or version (404), or an id that is not
# one (400); never a file outside the data dir.
TRAVERSALS = {
    "/api/sessions/..%2F..%2Fetc": 404,
    "/api/sessions/%2e%2e/snapshots": 400,
    "/api/sessions/a%2F..%2F..%2Fx/resume": 404,
    "/api/sessions/..": 404,
    "/api/sessions/conf/snapshots/..%2F1/markdown": 404,
    "/api/sessions/conf/snapshots/-1/markdown": 400,
}


def test_ids_cannot_traverse(client: httpx.Client) -> None:
    client.put("/api/sessions/conf", json={})
    for path, status in TRAVERSALS.items():
        r = client.get(path)
        assert r.status_code == status, (path, r.status_code, r.text)
        assert "root:" not in r.text


def test_a_symlink_made_after_the_watch_is_refused_when_read(
    client: httpx.Client, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    client.put("/api/sessions/late", json={})
    for spec in (
        {"kind": "log", "path": f"{logs}/*.log"},
        {"kind": "artifact", "path": f"{logs}/*.log"},
    ):
        assert client.post("/api/sessions/late/watches", json=spec).status_code == 201
    (logs / "a.log").symlink_to("/etc/passwd")  # planted after the watch was accepted
    snap = client.post("/api/sessions/late/snapshots").json()["observations"]
    assert snap["logs"]["items"] == [] and snap["artifacts"]["items"] == []
    reasons = [u["reason"] for u in snap["logs"]["unavailable"] + snap["artifacts"]["unavailable"]]
    assert reasons and all("outside the watch roots" in r for r in reasons)
    assert "root:x:0:0" not in client.get("/api/sessions/late/resume?fresh=false").text
