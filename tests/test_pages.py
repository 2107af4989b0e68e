"""The HTML pages over a real server and store: every page, escaping, CSP, errors, charts."""

import base64
import hashlib
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
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
from markupsafe import escape

from tests.conftest import FIXTURES, Server, app_client, free_port, tagged, wait_until
from tests.test_attempts import _hook, _run, _versions

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
    assert ok.status_code == 201, ok.text  # a new session
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
        assert "default-src 'none'" in csp
        # no script runs but the page's own inline ones (the session page's live view), by hash
        scripts = re.findall(r"<script>(.*?)</script>", response.text, re.S)
        hashes = [f"'sha256-{base64.b64encode(hashlib.sha256(js.encode()).digest()).decode()}'"
                  for js in scripts]  # fmt: skip
        allowed = re.search(r"script-src ([^;]*)", csp)
        assert (allowed[1].split() if allowed else []) == hashes, path
        assert len(scripts) == (path == "/s/demo"), path
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
    for anchor in ("handover", "now", "processes", "logs", "changes-since-v1"):
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


# --- a session with a running attempt and two failed ones, made by real processes ----------------

# A stand-in for an inference server: the first two launches die with the errors real ones
# print; the third serves its port and waits.
SERVE = textwrap.dedent(
    """
    import socket, sys, time
    args = sys.argv[1:]
    print("Loading model...", flush=True)
    if "32768" in args:
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB",
              file=sys.stderr, flush=True)
        sys.exit(1)
    if "fp8" in args:
        print("ValueError: fp8 quantization needs compute capability 8.9", file=sys.stderr,
              flush=True)
        sys.exit(1)
    listener = socket.socket()
    listener.bind(("127.0.0.1", int(args[args.index("--port") + 1])))
    listener.listen()
    print("Uvicorn running, waiting for requests", flush=True)
    time.sleep(600)
    """
)
TITLE = "Serve Kimi K2 with a 32k context"
# a log name with no place to break a line but anywhere: the table of contents must wrap it
LONG_LOG = "logs/kimi_k2_instruct_tp8_max_model_len_32768_attempt_1.log"


@dataclass
class Launched:
    sid: str
    pid: int  # the running attempt's process
    port: int
    version: int  # the newest stored version, which holds all three attempts as they ended
    snapshot: dict


def _more_than(server: Server, sid: str, versions: int) -> bool:
    return _versions(server, sid) > versions


def _as_wanted(server: Server, sid: str) -> dict | None:
    """A stored version once attempts 1 and 2 have ended with their errors and attempt 3 runs
    with its port listening; None until then."""
    answer = httpx.post(f"{server.url}/api/sessions/{sid}/snapshots", timeout=60)
    answer.raise_for_status()
    launches = [i for i in answer.json()["narrative"]["history"] if i["source"] == "launch"]
    states = [(i["status"], bool(i["error"]), i["port_open"]) for i in launches]
    want = [("ended", True, False), ("ended", True, False), ("running", False, True)]
    return answer.json() if states == want else None


def try_three_times(server: Server, tmp: Path, tag: str) -> Launched:
    """Three launches by real shell lines, reported as Claude Code reports them: two die at
    once (out of memory, then fp8), the third serves its port."""
    workspace = tmp / "kimi"
    (workspace / "logs").mkdir(parents=True)
    (workspace / "serve.py").write_text(SERVE)
    port = free_port()
    _hook(server, workspace, "UserPromptSubmit", prompt="Serve Kimi K2 with a longer context")
    sid = "kimi"
    httpx.put(f"{server.url}/api/sessions/{sid}", json={"title": TITLE}).raise_for_status()
    serve = f"nohup {sys.executable} serve.py --port {port} --tag {tag}"
    lines = [
        f"{serve} --max-model-len 32768 > {LONG_LOG} 2>&1 &",
        f"{serve} --max-model-len 8192 --quantization fp8 > logs/attempt_2.log 2>&1 &",
        f"{serve} --max-model-len 8192 > logs/attempt_3.log 2>&1 &",
    ]
    for n, line in enumerate(lines, start=1):
        before = _versions(server, sid)
        _run(server, workspace, line, n)
        wait_until(partial(_more_than, server, sid, before), f"the settling snapshot of launch {n}")
    snapshot = wait_until(lambda: _as_wanted(server, sid), "two attempts dead, the third serving")
    (pid,) = tagged(tag)
    return Launched(sid, pid, port, snapshot["header"]["version"], snapshot)


def main_of(html: str) -> str:
    return html.split("<main>", 1)[1].split("</main>", 1)[0]


def test_session_and_version_pages_lead_with_what_runs_and_say_each_thing_once(
    rooted_server: Server, tmp_path: Path, tag: str
):
    tried = try_three_times(rooted_server, tmp_path, tag)
    with rooted_server.client() as c:
        session = main_of(c.get(f"/s/{tried.sid}").text)
        version = c.get(f"/s/{tried.sid}/v/{tried.version}").text
    # The session page: the running attempt, its pid, port and log, then what was tried, all
    # before the history; the now page linked as the page's first action.
    history = session.index('id="timeline"')
    running = session.index(f"pid <code>{tried.pid}</code>")
    assert running < history
    assert session.index(">running</span> <strong>attempt 3</strong>") < running
    assert session.index(f'<code>{tried.port}</code> <span class="yes">listening</span>') < history
    assert session.index("logs/attempt_3.log</code>") < history
    table = session[session.index('id="tried"') : history]
    assert table.count(">dead</span>") == 2 and table.count(">running</span>") == 1
    assert "torch.OutOfMemoryError: CUDA out of memory" in table
    assert "ValueError: fp8 quantization needs compute capability 8.9" in table
    assert "--quantization fp8 added; --max-model-len 32768 → 8192" in table
    assert session.index(f'<a class="button" href="/s/{tried.sid}/now">') < running
    # its journal lists the launches the agent's commands made
    journal = session[session.index('id="journal"') : session.index('id="watches"')]
    assert journal.count("<td>launch ") == 3
    assert "--max-model-len 32768" in journal and "attempt 3: running for" in journal
    # The version page: its title once (not again as the dump's heading and bold line), its
    # signals once (not again as the dump's Now).
    assert version.count(str(escape(TITLE))) == 1
    signals = tried.snapshot["signals"]
    assert signals and version.count('<div class="signal">') == len(signals)
    for signal in signals:
        assert main_of(version).count(str(escape(signal["text"]))) == 1, signal["text"]
    assert version.count('id="now"') == 1 and version.count('href="#now"') == 1
    assert "kimi_k2_instruct_tp8_max_model_len_32768_attempt_1.log</a>" in version  # the TOC


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
        "session.html": {"sid": "s1", "page": pagedata.session_page(snapshotter, "s1")},
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


def test_a_snapshot_page_shows_the_dump_without_what_it_states_itself():
    dump = pagedata.snapshot_html(
        "# s · v1 · trigger `manual`\n\n**A title**\n\n## Objective\n\nserve it\n\n"
        "## Now\n\n- **info**: a signal\n\n## Logs\n\n```text\n## Now\n```\n\n- a\n  b\n"
    )
    assert [h.anchor for h in dump.toc] == ["objective", "logs"]
    assert "<h1" not in dump.html and "A title" not in dump.html and "a signal" not in dump.html
    assert "## Now\n</code>" in dump.html  # a log line that reads as a heading stays
    assert "a<br />\nb" in dump.html  # a line break in the dump is one on the page
