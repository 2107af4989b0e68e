"""A stopping server answers its long polls first: an agent's waiter or a reader waiting on
the news board gets its (empty) answer at once, and nothing is cut off with a traceback."""

import threading
import time
from pathlib import Path

import httpx

from tests.conftest import start_server, stop_server


def test_a_long_poll_is_answered_when_the_server_stops(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log")
    answers: list[httpx.Response] = []
    try:
        httpx.put(f"{server.url}/api/sessions/waits", json={"title": "waits"}, timeout=10)

        def poll() -> None:
            url = f"{server.url}/api/sessions/waits/news"
            answers.append(httpx.get(url, params={"wait": 60}, timeout=90))

        waiting = threading.Thread(target=poll)
        waiting.start()
        time.sleep(1.5)  # the poll waits on the board by now
        started = time.monotonic()
    finally:
        stop_server(server)
    waiting.join(timeout=30)
    (answer,) = answers
    assert answer.status_code == 200 and answer.json()["news"] == []
    assert time.monotonic() - started < 30  # answered at the stop, not after its 60 s
    assert "Traceback" not in server.log(), server.log()


def test_a_pages_news_stream_ends_when_the_server_stops(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log")
    received: list[str] = []
    try:
        httpx.put(f"{server.url}/api/sessions/reads", json={"title": "reads"}, timeout=10)

        def read() -> None:
            with httpx.stream("GET", f"{server.url}/s/reads/news", timeout=90) as stream:
                received.extend(stream.iter_lines())

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(1.5)  # the stream waits on the board by now
    finally:
        stop_server(server)
    reader.join(timeout=30)
    assert not reader.is_alive()  # the stream ended with the server
    assert len(received) < 10, received[:20]  # no burst of "nothing new" while it stopped
    assert "Traceback" not in server.log(), server.log()
