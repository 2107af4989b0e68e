"""The session page's live view (issue 43's last point): a page open while an attempt dies
shows the death without a reload, fed by the same news the agent's waiter gets (server-sent
events, one wait on the news board per reader). In a real headless Chromium."""

import sys
from pathlib import Path

import httpx

from tests.conftest import Server, tagged

# Chromium and playwright, or the module is skipped as the browser tests are, with their reason
from tests.test_pages_browser import (
    Watched,
    browser,  # noqa: F401  (headless Chromium, a fixture)
)
from tests.test_wake import (
    launch,
    quick_server,  # noqa: F401  (ctxd with quick event probes, a fixture)
    work,  # noqa: F401  (a checkout whose serve.py dies with an OOM error, a fixture)
)


def test_a_page_open_while_an_attempt_dies_shows_it_without_a_reload(
    browser,  # noqa: F811  (the fixture imported above)
    quick_server: Server,  # noqa: F811  (the fixture imported above)
    work: Path,  # noqa: F811  (the fixture imported above)
    tag: str,
) -> None:
    server = quick_server
    launch(server, work, f"nohup {sys.executable} serve.py 4 --tag {tag} > serve.log 2>&1 &")
    (pid,) = tagged(tag)
    tab = Watched(browser, server.url)
    try:
        tab.page.goto("/s/work")
        live = tab.page.locator("#live")
        assert live.is_hidden()  # nothing has happened since the page was shown
        tab.page.evaluate("window.__loaded_once = true")  # gone if the page reloads
        told = tab.page.locator("#live li.died")
        told.wait_for(state="visible", timeout=60_000)
        text = told.inner_text()
        assert "attempt 1" in text and "OutOfMemoryError" in text and f"pid {pid}" in text, text
        assert tab.page.evaluate("window.__loaded_once") is True  # the same page, not reloaded
        assert live.is_visible() and tab.page.locator("#live li").count() == 1
        # the stream is the news the API tells, version for version
        news = httpx.get(f"{server.url}/api/sessions/work/news", params={"since": 0}, timeout=30)
        (died,) = news.json()["news"]
        assert told.get_attribute("data-version") == str(died["version"]), died
        assert tab.errors == [] and tab.foreign == []  # the CSP let the script and stream run
    finally:
        tab.close()


def test_the_stream_refuses_an_unknown_session(quick_server: Server) -> None:  # noqa: F811
    answer = httpx.get(f"{quick_server.url}/s/nosuch/news", timeout=30)
    assert answer.status_code == 404 and "nosuch" in answer.text, answer.text
