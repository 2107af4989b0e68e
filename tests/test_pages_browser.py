"""The HTML pages in a real headless Chromium: no console error, payloads inert, links work."""

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Server, start_server, stop_server
from tests.test_pages import BUSY, PAGES, PAYLOADS, seed, try_three_times

CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT = {"width": 1280, "height": 900}
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if not CHROMIUM.exists():
    pytest.skip(
        "no Chromium at /usr/bin/chromium: `apt-get install chromium` to run the browser tests",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed: pip install -e '.[dev]'"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("browser")
    child = subprocess.Popen([sys.executable, "-c", BUSY, PAYLOADS[0], PAYLOADS[1]])
    server = start_server(tmp / "data", tmp / "ctxd.log")
    try:
        with server.client() as client:
            seed(client, tmp, child)
        yield server
    finally:
        stop_server(server)
        child.kill()
        child.wait()


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=ARGS
        )
        yield chromium
        chromium.close()


class Watched:
    """A page with everything that would betray a problem recorded: errors, dialogs, requests."""

    def __init__(self, browser, base: str, javascript: bool = True) -> None:
        self.context = browser.new_context(
            base_url=base, java_script_enabled=javascript, viewport=VIEWPORT
        )
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.foreign: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)
        self.page.on(
            "request", lambda r: None if r.url.startswith(base) else self.foreign.append(r.url)
        )

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def tab(browser, site) -> Iterator[Watched]:
    watched = Watched(browser, site.url)
    yield watched
    watched.close()


def test_every_page_loads_without_console_errors_or_outside_requests(tab):
    for path in PAGES:
        response = tab.page.goto(path)
        assert response is not None and response.status == 200, path
        tab.page.wait_for_load_state("load")
    assert tab.errors == []
    assert tab.foreign == []


def test_version_page_shows_the_dump_sections_with_a_working_toc(tab):
    tab.page.goto("/s/demo/v/2")
    headings = tab.page.locator(".column h2").all_inner_texts()
    for section in ("Now", "Handover", "Processes", "Logs", "Changes since v1"):
        assert headings.count(section) == 1, headings
    assert tab.page.locator(".column h1").count() == 0  # the page's own h1 says the title
    tab.page.locator("nav.toc a", has_text="Logs").first.click()
    assert tab.page.url.endswith("#logs")


def test_previous_next_and_diff_links_lead_where_they_say(tab):
    tab.page.goto("/s/demo/v/2")
    tab.page.click("a[rel=next]")
    assert tab.page.url.endswith("/s/demo/v/3")
    tab.page.click("a[rel=prev]")
    tab.page.click("a[rel=prev]")
    assert tab.page.url.endswith("/s/demo/v/1")
    assert tab.page.locator("a[rel=prev]").count() == 0
    tab.page.goto("/s/demo/v/3")
    tab.page.click("text=diff with v2")
    assert tab.page.url.endswith("/s/demo/diff?from=2&to=3")
    assert tab.page.locator(".diff .add").count() > 0
    tab.page.fill("input[name=from]", "1")
    tab.page.click("input[type=submit]")
    assert tab.page.url.endswith("/s/demo/diff?from=1&to=3")
    assert tab.errors == []


def test_planted_payloads_show_as_text_and_run_nothing(tab):
    for path in ["/s/demo", "/s/demo/v/3", "/s/demo/diff?from=1&to=3", "/s/demo/now"]:
        tab.page.goto(path)
        tab.page.wait_for_load_state("load")
        assert tab.page.evaluate("window.__pwned") is None, path
        assert tab.page.locator("a[href^='javascript:']").count() == 0, path
        assert tab.page.locator("main script, main img").count() == 0, path
    tab.page.goto("/s/demo/v/3")
    text = tab.page.locator("article.dump").inner_text()
    assert "<script>window.__pwned = 1; alert('script')</script>" in text  # command line
    assert "<img src=x onerror=" in text  # objective and log line
    assert "```` a run of backticks ```` and `` more" in text  # inside the log fence
    tab.page.goto("/s/demo")
    assert (
        "[click me](javascript:window.__pwned=3)"
        in tab.page.locator("#journal + table").inner_text()
    )
    assert tab.dialogs == []
    assert tab.errors == []


def test_session_page_draws_sparklines_and_the_version_strip(tab):
    tab.page.goto("/s/demo")
    assert tab.page.locator("svg.spark").count() == 2
    assert tab.page.locator("svg.spark polyline").count() >= 1
    box = tab.page.locator("svg.spark").first.bounding_box()
    assert box is not None and box["width"] > 100
    marks = tab.page.locator("svg.strip circle")
    assert marks.count() >= 3
    tab.page.locator("svg.strip a").last.click()
    assert tab.page.url.endswith("/s/demo/v/3")


def test_take_button_works_without_javascript(browser, site):
    watched = Watched(browser, site.url, javascript=False)
    try:
        watched.page.goto("/s/demo/now")
        watched.page.click("button[type=submit]")
        watched.page.wait_for_url("**/s/demo/v/*")
        version = int(watched.page.url.rsplit("/", 1)[1])
        assert version >= 4
        assert "manual" in watched.page.locator("main > p.muted").inner_text()
    finally:
        watched.close()


def test_screenshots_for_a_person_to_look_at(tab):
    ARTIFACTS.mkdir(exist_ok=True)
    for name, path in [
        ("index", "/"),
        ("session", "/s/demo"),
        ("version", "/s/demo/v/2"),
        ("diff", "/s/demo/diff?from=1&to=3"),
    ]:
        tab.page.goto(path)
        target = ARTIFACTS / f"pages-{name}.png"
        tab.page.screenshot(path=str(target), full_page=name != "version")
        assert target.stat().st_size > 5000
    assert tab.errors == []


# Each link of the table of contents and the column beside it, as the page lays them out.
BOXES = """() => {
  const right = (e) => e.getBoundingClientRect().right;
  return {
    toc: right(document.querySelector("nav.toc")),
    column: document.querySelector(".column").getBoundingClientRect().left,
    links: [...document.querySelectorAll("nav.toc a")].map(
      (a) => ({text: a.textContent, right: right(a), lines: a.getClientRects().length})),
    page: document.documentElement.scrollWidth,
  };
}"""


def test_a_running_attempt_and_two_failed_ones_in_chromium(browser, rooted_server, tmp_path, tag):
    """The session page shows the running attempt in its first screen, above the history; the
    version page's long log path wraps inside the table of contents. Screenshots of both."""
    tried = try_three_times(rooted_server, tmp_path, tag)
    tab = Watched(browser, rooted_server.url)
    try:
        tab.page.goto(f"/s/{tried.sid}")
        current = tab.page.locator(".current")
        assert f"pid {tried.pid}" in current.inner_text() and "running" in current.inner_text()
        box, history = current.bounding_box(), tab.page.locator("#timeline").bounding_box()
        assert box is not None and history is not None
        assert box["y"] + box["height"] <= VIEWPORT["height"] and box["y"] < history["y"]
        ARTIFACTS.mkdir(exist_ok=True)
        tab.page.screenshot(path=str(ARTIFACTS / "pages-attempts-session.png"), full_page=True)

        tab.page.goto(f"/s/{tried.sid}/v/{tried.version}")
        boxes = tab.page.evaluate(BOXES)
        assert boxes["toc"] <= boxes["column"] and boxes["page"] <= VIEWPORT["width"]
        for link in boxes["links"]:
            assert link["right"] <= boxes["toc"] + 0.5, link  # inside its column, wrapped
        (long,) = [link for link in boxes["links"] if "kimi_k2_instruct" in link["text"]]
        assert long["lines"] > 1
        tab.page.screenshot(path=str(ARTIFACTS / "pages-attempts-version.png"))
        assert tab.errors == [] and tab.foreign == []
    finally:
        tab.close()
