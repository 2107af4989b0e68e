"""Cuts of observed text happen after redaction: no token survives in part (issue 18, item 4)."""

import http.server
import threading
from collections.abc import Iterator

import pytest
from ctxd.collectors import commands, host, ports

TOKEN = "ghp_" + "Q7w8E9r0T1y2U3i4O5p6A7s8D9f0G1h2"  # 36 characters, a GitHub token's shape


def _pieces(text: str) -> list[str]:
    """Every 8-character piece of the token found in `text` (8 is more than a chance match)."""
    return [TOKEN[i : i + 8] for i in range(len(TOKEN) - 7) if TOKEN[i : i + 8] in text]


def test_command_output_cut_inside_a_token_keeps_none_of_it() -> None:
    prefix = "x" * 110 + " "
    out = commands.run(["printf", "%s", prefix + TOKEN + " tail\n"], 5.0, len(prefix) + 20)
    assert out["output_cut"] is True
    assert _pieces("\n".join(out["output"])) == [], out["output"]


@pytest.fixture
def body_server() -> Iterator[str]:
    body = ("y" * 180 + " " + TOKEN + " more").encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/health"
    finally:
        srv.shutdown()


def test_health_body_excerpt_cut_inside_a_token_keeps_none_of_it(body_server: str) -> None:
    status, error, _, excerpt = ports.probe_health(body_server)
    assert status == 200 and error is None
    assert excerpt is not None and _pieces(excerpt) == [], excerpt


def test_failure_reasons_are_cut_after_redaction() -> None:
    def boom() -> str:
        raise RuntimeError("z" * 170 + " " + TOKEN)

    _, failures = host._probe({"kernel": boom})
    assert _pieces(failures[0].reason) == [], failures[0].reason
    assert _pieces(ports._short("cannot connect: " + "w" * 170 + " " + TOKEN)) == []
