"""Redaction, round two: the forms a red-team pass got through, each pinned by a case."""

from collections.abc import Iterator

import pytest

from service import redact, redact_known
from service.redact import REDACTED

SECRET = "abcdefABCDEF1234567890xyz"


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    redact._text_short.cache_clear()
    redact_known.forget_all()
    yield
    redact._text_short.cache_clear()
    redact_known.forget_all()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["mysql", "-p", "Hunter2Secret", "-u", "root"], ["mysql", "-p", REDACTED, "-u", "root"]),
        (["mysql", "-pHunter2Secret"], ["mysql", "-p" + REDACTED]),
        (
            ["curl", "-u", "user:password123", "http://x"],
            ["curl", "-u", "user:" + REDACTED, "http://x"],
        ),
        (["curl", "--user", "bob:pa55word99"], ["curl", "--user", "bob:" + REDACTED]),
        (["curl", "--user=bob:pa55word99"], ["curl", "--user=bob:" + REDACTED]),
        # -p as a port, a parent-directory switch or a pid stays readable.
        (["docker", "run", "-p", "8080:80"], ["docker", "run", "-p", "8080:80"]),
        (["ssh", "-p", "2222", "h"], ["ssh", "-p", "2222", "h"]),
        (["mkdir", "-p", "/var/run/x"], ["mkdir", "-p", "/var/run/x"]),
        (["gcc", "-pthread", "a.c"], ["gcc", "-pthread", "a.c"]),
        (["curl", "-u", "justauser", "h"], ["curl", "-u", "justauser", "h"]),
    ],
)
def test_password_flags(args: list[str], expected: list[str]) -> None:
    assert redact.argv(args) == expected


def test_password_flags_are_learned() -> None:
    redact.argv(["mysql", "-p", "Hunter2Secret"])
    redact.argv(["curl", "-u", "user:password123"])
    assert redact.text("saw Hunter2Secret and password123") == f"saw {REDACTED} and {REDACTED}"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("mysql -p Hunter2Secret db", f"mysql -p {REDACTED} db"),
        ("curl -u user:password123 http://h", f"curl -u user:{REDACTED} http://h"),
        ("ssh -p 2222 host", "ssh -p 2222 host"),
        (
            f"fetching https://api.example.com/v1/models?access_token={SECRET}",
            f"fetching https://api.example.com/v1/models?access_token={REDACTED}",
        ),
        (
            f"--endpoint https://api.example.com/v1?x=1&api_key={SECRET}&y=2",
            f"--endpoint https://api.example.com/v1?x=1&api_key={REDACTED}&y=2",
        ),
        (
            f'"GET /v1/models?token={SECRET} HTTP/1.1" 200',
            f'"GET /v1/models?token={REDACTED} HTTP/1.1" 200',
        ),
        ("https://h/search?q=hello&page=2", "https://h/search?q=hello&page=2"),
        (f"MY_SERVICE_KEY={SECRET}", f"MY_SERVICE_KEY={REDACTED}"),
        (f"export STRIPE_KEYS={SECRET}", f"export STRIPE_KEYS={REDACTED}"),
        ("sort_key=name primary_key=id", "sort_key=name primary_key=id"),
    ],
)
def test_free_text_forms(raw: str, expected: str) -> None:
    assert redact.text(raw) == expected


def test_query_token_in_argv() -> None:
    url = f"https://api.example.com/v1?api_key={SECRET}"
    assert redact.argv(["--endpoint", url]) == ["--endpoint", url.replace(SECRET, REDACTED)]


def test_names_ending_in_key() -> None:
    out = redact.env({"MY_SERVICE_KEY": SECRET, "SORT_KEY": "name", "KEY": "x", "MONKEY": "y"})
    assert out == {"MY_SERVICE_KEY": REDACTED, "SORT_KEY": "name", "KEY": "x", "MONKEY": "y"}


def test_url_password_is_learned() -> None:
    assert redact.env({"DATABASE_URL": "postgres://u:pwSecret99@h/db"}) == {
        "DATABASE_URL": f"postgres://u:{REDACTED}@h/db"
    }
    assert redact.text("later pwSecret99 appears") == f"later {REDACTED} appears"


def test_url_password_learned_from_free_text_and_unquoted() -> None:
    redact.text("connect postgres://u:p%40ssWord99@h/db")
    assert redact.text("p@ssWord99 again") == f"{REDACTED} again"


def test_query_token_is_learned() -> None:
    redact.text(f"GET /x?access_token={SECRET}")
    assert redact.text(f"then {SECRET}") == f"then {REDACTED}"


def test_access_log_query_token() -> None:
    import logging

    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", f"/r?to=https://h.example/v1?access_token={SECRET}", "1.1", 200),
        None,
    )  # fmt: skip
    redact.RedactingFilter().filter(record)
    assert SECRET not in record.getMessage()
    assert f"access_token={REDACTED}" in record.getMessage()
    own = logging.LogRecord(
        "service.x", logging.INFO, __file__, 1, "fetching %s",
        (f"https://api.example.com/v1/models?access_token={SECRET}",), None,
    )  # fmt: skip
    redact.RedactingFilter().filter(own)
    assert own.getMessage() == f"fetching https://api.example.com/v1/models?access_token={REDACTED}"
