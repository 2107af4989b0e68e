"""The session folder keeps the newest versions' Markdown files only (CTXD_MARKDOWN_FILES);
every version stays readable as Markdown from the database: API, HTML page and CLI."""

from pathlib import Path

import pytest

from tests.conftest import app_client, ctxd, start_server, stop_server


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.md"))


def test_older_files_go_and_every_version_still_reads_as_markdown(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_server(data, tmp_path / "ctxd.log", env={"CTXD_MARKDOWN_FILES": "3"})
    try:
        with server.client() as c:
            c.put("/api/sessions/s", json={"objective": "keep a window"})
            for i in range(6):
                c.post("/api/sessions/s/journal", json={"kind": "finding", "text": f"found {i}"})
                assert c.post("/api/sessions/s/snapshots", json={"force": True}).status_code == 201
            folder = data / "s"
            assert _files(folder) == ["latest.md", "v0004.md", "v0005.md", "v0006.md"]
            assert (folder / "latest.md").read_text() == (folder / "v0006.md").read_text()
            for version in range(1, 7):
                answer = c.get(f"/api/sessions/s/snapshots/{version}/markdown")
                assert answer.status_code == 200
                assert answer.text.startswith(f"# s · v{version} ")
                assert f"found {version - 1}" in answer.text
                page = c.get(f"/s/s/v/{version}")
                assert page.status_code == 200 and f"found {version - 1}" in page.text
            shown = ctxd(server.url, "show", "s", "1")
            assert shown.returncode == 0, shown.stderr
            assert shown.stdout == c.get("/api/sessions/s/snapshots/1/markdown").text
    finally:
        stop_server(server)

    # start-up rewrites only the files inside the (now smaller) window, and trims the rest
    (data / "s" / "v0006.md").unlink()
    (data / "s" / "latest.md").unlink()
    server = start_server(data, tmp_path / "ctxd.log", env={"CTXD_MARKDOWN_FILES": "2"})
    try:
        assert _files(data / "s") == ["latest.md", "v0005.md", "v0006.md"]
        with server.client() as c:
            expected = c.get("/api/sessions/s/snapshots/6/markdown").text
        assert (data / "s" / "v0006.md").read_text() == expected
    finally:
        stop_server(server)


@pytest.mark.parametrize(
    ("setting", "versions", "kept_from"),
    [({"markdown_files": 0}, 25, 1), ({}, 23, 4)],
    ids=["zero keeps every version's file", "the default keeps twenty"],
)
def test_how_many_version_files_a_folder_keeps(
    tmp_path: Path, setting: dict, versions: int, kept_from: int
) -> None:
    with app_client(tmp_path / "data", trigger_interval_s=3600, **setting) as c:
        c.put("/api/sessions/s", json={})
        for i in range(versions):
            c.post("/api/sessions/s/journal", json={"kind": "note", "text": f"note {i}"})
            assert c.post("/api/sessions/s/snapshots", json={"force": True}).status_code == 201
    names = _files(tmp_path / "data" / "s")
    assert names == ["latest.md", *(f"v{v:04d}.md" for v in range(kept_from, versions + 1))]
