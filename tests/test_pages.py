"""The HTML pages over a real server and store: every page, escaping, CSP, errors, charts."""

import base64
import hashlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import jinja2
import pytest
from ctxd.models import JournalIn, LogWatch, ProcessWatch, SessionIn, Signal
from ctxd.render import charts, pagedata
from ctxd.render.html import ENV
from ctxd.render.markdown import TEMPLATES, markdown_html
from ctxd.settings import Settings
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store

from tests.conftest import FIXTURES, app_client

# Each payload would run script or fetch something if a page let it through unescaped.
PAYLOADS = [
    "<script>window.__pwned = 1; alert('script')</script>",
    "<img src=x onerror=\"window.__pwned = 2; alert('img')\">",
    "[click me](javascript:window.__pwned=3)",
    "```` a run of backticks ```` and `` more",
]
BUSY = (
    "import time\n"
    "while True:\n"
    "    end = time.monotonic() + 0.02\n"
    "    while time.monotonic() < end: pass\n"
    "    time.sleep(0.08)\n"
)
PAGES = ["/", "/s/demo", "/s/demo/v/1", "/s/demo/v/2", "/s/demo/v/3", "/s/demo/diff", "/s/demo/now"]


@dataclass
class Seeded:
    sid: str
    log: Path
    child: subprocess.Popen


def seed(client: httpx.Client, tmp: Path, child: subprocess.Popen) -> Seeded:
    """A session with a process, logs, a journal and three versions, payloads planted in all."""
    log = tmp / "server.log"
    log.write_text("starting\n" + "\n".join(PAYLOADS) + "\n")
    sid = "demo"
    ok = client.put(
        f"/api/sessions/{sid}", json={"title": "Demo <b>bold</b>", "objective": PAYLOADS[1]}
    )
    assert ok.status_code in (200, 201), ok.text
    watches = [
        {"kind": "process", "pid": child.pid},
        {"kind": "log", "path": str(log), "lines": 20},
        {"kind": "port", "port": 9, "host": "127.0.0.1"},
    ]
    real = FIXTURES / "logs" / "sglang_tp2_hang_after_weights_loaded.log"
    copy = tmp / real.name  # copied under tmp: the fixtures lie outside the default watch roots
    shutil.copyfile(real, copy)
    watches.append({"kind": "log", "path": str(copy), "lines": 15})
    for watch in watches:
        assert client.post(f"/api/sessions/{sid}/watches", json=watch).status_code == 201
    entries = [
        {
            "kind": "attempt",
            "text": "restart with --tp 2",
            "outcome": PAYLOADS[0],
            "status": "failed",
        },
        {"kind": "finding", "text": PAYLOADS[2]},
        {"kind": "next", "text": PAYLOADS[3]},
        {"kind": "fact", "key": "model", "text": "Qwen3-14B"},
    ]
    for entry in entries:
        assert client.post(f"/api/sessions/{sid}/journal", json=entry).status_code == 201
    for i in range(3):
        with log.open("a") as handle:
            handle.write(f"step {i} <script>alert({i})</script>\n")
        assert client.post(f"/api/sessions/{sid}/snapshots").status_code == 201
    return Seeded(sid, log, child)


@pytest.fixture
def busy_child() -> Iterator[subprocess.Popen]:
    child = subprocess.Popen([sys.executable, "-c", BUSY, PAYLOADS[0], PAYLOADS[1]])
    yield child
    child.kill()
    child.wait()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Seeded]]:
    """One seeded app for the page tests, in-process: they read pages; the few that write use
    sessions of their own. The browser tests (test_pages_browser.py) use a real server."""
    tmp = tmp_path_factory.mktemp("pages")
    child = subprocess.Popen([sys.executable, "-c", BUSY, PAYLOADS[0], PAYLOADS[1]])
    try:
        with app_client(tmp / "data") as client:
            yield client, seed(client, tmp, child)
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def client(site: tuple[httpx.Client, Seeded]) -> httpx.Client:
    return site[0]


@pytest.fixture
def seeded(site: tuple[httpx.Client, Seeded]) -> Seeded:
    return site[1]


def inline_style(html: str) -> str:
    match = re.search(r"<style>(.*?)</style>", html, re.S)
    assert match, "no inline stylesheet"
    return match.group(1)


def test_every_page_is_html_with_a_strict_policy_matching_its_one_stylesheet(client, seeded):
    for path in PAGES:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[-500:])
        assert response.headers["content-type"] == "text/html; charset=utf-8"
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp
        digest = hashlib.sha256(inline_style(response.text).encode()).digest()
        assert f"'sha256-{base64.b64encode(digest).decode()}'" in csp, path
        assert response.headers["x-content-type-options"] == "nosniff"
        # No asset from outside: nothing on the page points at another host.
        assert not re.search(r"(src|href)=\"(https?:)?//", response.text), path
        assert " style=" not in response.text, path  # the CSP would block it


def test_payloads_from_logs_command_lines_and_journal_render_as_text(client, seeded):
    for path in ["/s/demo", "/s/demo/v/3", "/s/demo/diff?from=1&to=3", "/s/demo/now"]:
        html = client.get(path).text
        assert "<script>window" not in html and "<script>alert" not in html, path
        assert "<img src=x" not in html and "<b>bold" not in html, path
        assert 'href="javascript:' not in html, path
    version = client.get("/s/demo/v/3").text
    assert "&lt;script&gt;window.__pwned = 1" in version  # the command line and the outcome
    assert "&lt;img src=x onerror=" in version  # the objective and the log
    assert "```` a run of backticks ````" in version


def test_version_page_has_anchored_sections_a_toc_and_links(client, seeded):
    html = client.get("/s/demo/v/2").text
    for anchor in ("objective", "now", "processes", "logs", "changes-since-v1"):
        assert f'id="{anchor}"' in html and f'href="#{anchor}"' in html, anchor
    assert 'href="/s/demo/v/1"' in html and 'href="/s/demo/v/3"' in html
    assert 'href="/api/sessions/demo/snapshots/2/markdown"' in html
    assert 'href="/api/sessions/demo/snapshots/2"' in html
    assert 'href="/s/demo/diff?from=1&amp;to=2"' in html


def test_session_page_shows_timeline_sparklines_journal_and_watches(client, seeded):
    html = client.get("/s/demo").text
    assert html.count('<svg class="spark"') == 2  # CPU and RSS of the one process watch
    assert "<polyline points=" in html
    assert html.count('href="/s/demo/v/') >= 6  # strip marks and table rows
    assert "Qwen3-14B" in html and "restart with --tp 2" in html
    assert f"pid <code>{seeded.child.pid}</code>" in html


def test_index_lists_the_session_with_its_latest_version(client, seeded):
    html = client.get("/").text
    assert 'href="/s/demo/v/3"' in html and "Demo &lt;b&gt;bold&lt;/b&gt;" in html


def test_diff_page_shows_added_lines_and_the_change_list(client, seeded):
    html = client.get("/s/demo/diff?from=1&to=3").text
    assert '<div class="add">' in html and '<div class="del">' in html
    assert "grew by" in html


def test_take_button_stores_a_version_and_redirects_to_it(client):
    client.put("/api/sessions/button", json={})
    assert client.post("/api/sessions/button/snapshots").status_code == 201
    response = client.post("/s/button/now")
    assert response.status_code == 303 and response.headers["location"] == "/s/button/v/2"
    assert client.get("/api/sessions/button/snapshots/2").json()["header"]["trigger"] == "manual"


def test_another_site_cannot_take_a_snapshot(client):
    client.put("/api/sessions/guarded", json={})
    assert client.post("/api/sessions/guarded/snapshots").status_code == 201
    response = client.post("/s/guarded/now", headers={"origin": "http://evil.example"})
    # refused by the access middleware before the page's own check is reached
    assert response.status_code == 403 and "cross-origin" in response.text
    assert [v["version"] for v in client.get("/api/sessions/guarded/snapshots").json()] == [1]


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/s/nope", 404, "no session"),
        ("/s/demo/v/99", 404, "no version 99"),
        ("/s/demo/v/0", 400, "version"),
        ("/s/BAD!", 400, "sid"),
        ("/s/demo/diff?from=x", 400, "from"),
        ("/s/demo/diff?from=1&to=42", 404, "no version 42"),
        ("/s/nope/now", 404, "no session"),
    ],
)
def test_bad_input_is_a_clear_html_error(client, seeded, path, status, words):
    response = client.get(path)
    assert response.status_code == status, response.text[-300:]
    assert response.headers["content-type"].startswith("text/html")
    assert "content-security-policy" in response.headers
    assert words in response.text and "Traceback" not in response.text


def test_diff_of_a_session_without_versions_says_how_to_get_one(client):
    client.put("/api/sessions/empty", json={})
    response = client.get("/s/empty/diff")
    assert response.status_code == 404 and "no versions yet" in response.text
    assert client.get("/s/empty").status_code == 200


# --- every template under StrictUndefined, in process ------------------------------------------


@pytest.fixture
def snapshotter(tmp_path: Path, busy_child: subprocess.Popen) -> Iterator[Snapshotter]:
    store = Store(tmp_path / "ctxd.db")
    snap = Snapshotter(Settings(data_dir=tmp_path), store)
    log = tmp_path / "x.log"
    log.write_text("\n".join(PAYLOADS) + "\n")
    store.put_session("s1", SessionIn(title="t", objective="o"))
    store.add_watch("s1", ProcessWatch(pid=busy_child.pid), 10)
    store.add_watch("s1", LogWatch(path=str(log)), 10)
    store.add_entry("s1", JournalIn(kind="note", text=PAYLOADS[0]))
    snap.take("s1")
    snap.take("s1", force=True)  # an unchanged session would only confirm v1
    yield snap
    snap.close()
    store.close()


def test_every_page_template_renders_under_strict_undefined(snapshotter):
    assert ENV.undefined is jinja2.StrictUndefined
    store = snapshotter.store
    contexts = {
        "index.html": {"rows": pagedata.index(store)},
        "session.html": {"sid": "s1", "page": pagedata.session_page(store, "s1")},
        "version.html": {"sid": "s1", "page": pagedata.version_page(store, "s1", 2)},
        "diff.html": {"sid": "s1", "page": pagedata.diff_page(snapshotter, "s1", None, None)},
        "now.html": {"sid": "s1", "page": pagedata.now_page(snapshotter, "s1")},
        "base.html": {"error": {"status": 404, "title": "not found", "detail": "gone"}},
        "search.html": {"page": pagedata.search_page(store, "s1", "snapshot", 0)},
    }
    on_disk = {p.name for p in TEMPLATES.glob("*.html") if not p.name.startswith("_")}
    assert on_disk == set(contexts), "a page template without a StrictUndefined test"
    for name, context in contexts.items():
        assert "</html>" in ENV.get_template(name).render(context), name


def test_a_missing_field_fails_the_render(snapshotter):
    page = pagedata.version_page(snapshotter.store, "s1", 1)
    with pytest.raises(jinja2.UndefinedError):
        ENV.get_template("version.html").render({"page": page})  # no sid


# --- pure parts ----------------------------------------------------------------------------


def test_sparkline_breaks_at_gaps_and_marks_lone_points():
    line = charts.sparkline([1.0, 2.0, None, 4.0, None, 3.0, 3.0], width=62, height=22)
    assert len(line.segments) == 2 and len(line.dots) == 1
    assert line.peak == 4.0 and line.last == 3.0
    assert charts.sparkline([None, None]).segments == []
    flat = charts.sparkline([0.0, 0.0, 0.0], width=10, height=10)
    assert flat.segments == ["2.0,8.0 5.0,8.0 8.0,8.0"]


def test_strip_colours_each_version_by_its_worst_signal():
    bad = Signal(severity="critical", code="exited", text="process 1 exited")
    meh = Signal(severity="info", code="x", text="fyi")
    strip = charts.strip([(1, "manual", []), (2, "quiet", [meh, bad])])
    assert [m.severity for m in strip.marks] == ["ok", "critical"]
    assert "process 1 exited" in strip.marks[1].title
    assert strip.marks[0].x < strip.marks[1].x <= strip.width


def test_markdown_html_escapes_raw_html_and_unsafe_links_and_anchors_headings():
    dump = markdown_html(
        "# t\n\n## Logs\n\n### a.log\n\n## Logs\n\n<script>x()</script>\n\n"
        "[a](javascript:x()) ![i](http://example.com/i.png)\n"
    )
    assert "<script>" not in dump.html and "&lt;script&gt;" in dump.html
    assert 'href="javascript:' not in dump.html and "<img" not in dump.html
    assert [(h.level, h.anchor) for h in dump.toc] == [(2, "logs"), (3, "alog"), (2, "logs-2")]
    assert '<h2 id="logs-2">' in dump.html
    table = markdown_html("| a | b |\n| --- | ---: |\n| 1 | 2 |\n").html
    assert 'class="align-right"' in table and "style=" not in table
