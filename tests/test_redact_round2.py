"""Redaction, round two: the forms a red-team pass got through, each pinned by a case."""

import pytest
from ctxd import redact
from ctxd.redact import REDACTED
from ctxd.redact import log_filter as redact_log

SECRET = "abcdefABCDEF1234567890xyz"


pytestmark = pytest.mark.usefixtures("fresh_redaction")


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
        (["python", "-m", "pytest", "-p", "no:cacheprovider"], None),
        (["curl", "-u", "justauser", "h"], ["curl", "-u", "justauser", "h"]),
        # an agent harness's -p is the user's prompt, as npx's is a package; a program ctxd
        # does not know still has its -p value taken for a password
        (["/usr/bin/claude", "-p", "why does it crash?"], None),
        (["gemini", "-p", "fix the build"], None),
        (["npm exec claude -p why does it crash --dangerously-skip-permissions"], None),
        (["npx", "-p", "cowsay", "cowsay", "hi"], None),
        (["mytool", "-p", "Hunter2Secret"], ["mytool", "-p", REDACTED]),
    ],
)
def test_password_flags(args: list[str], expected: list[str] | None) -> None:
    assert redact.argv(args) == (args if expected is None else expected)


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
    redact_log.RedactingFilter().filter(record)
    assert SECRET not in record.getMessage()
    assert f"access_token={REDACTED}" in record.getMessage()
    own = logging.LogRecord(
        "ctxd.x", logging.INFO, __file__, 1, "fetching %s",
        (f"https://api.example.com/v1/models?access_token={SECRET}",), None,
    )  # fmt: skip
    redact_log.RedactingFilter().filter(own)
    assert own.getMessage() == f"fetching https://api.example.com/v1/models?access_token={REDACTED}"


# --- cuts and windows ---------------------------------------------------------------------------

GHP36 = "ghp_" + "Q7w8E9r0T1y2U3i4O5p6A7s8D9f0G1h2"


def test_cut_redacts_before_cutting() -> None:
    line = "x" * 1990 + " " + GHP36 + " tail"
    assert 0 < len(line[:2000].split()[-1]) < len(GHP36), "the cut lands inside the token"
    out = redact.cut(line, 2000)
    assert GHP36[4:12] not in out
    assert len(out) <= 2000 + len(" …")


def test_cut_withholds_a_shape_fragment_at_the_edge() -> None:
    fragment = "error: token " + GHP36[:20]  # cut upstream: 20 of its 36 characters
    assert redact.text(fragment) == fragment, "a fragment no longer has the token's shape"
    out = redact.cut(fragment + " and more text beyond the cut", len(fragment))
    assert GHP36[4:20] not in out
    assert out.startswith("error: token ")


def test_cut_keeps_short_text_and_ordinary_edges() -> None:
    assert redact.cut("short", 300) == "short"
    assert redact.cut("a" * 400, 300) == "a" * 300 + " …"


def test_summary_cut() -> None:
    summary = "RuntimeError: " + "y" * 280 + f" key={GHP36}"
    assert GHP36[:20] not in redact.cut(summary, 300)


PEM64 = [
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "MZR4xG0kz3iVvF8X8Q1nBC+0XyZ3Tk7fS8uZfz5hJ2QjL1bF9Yv7t0rW2k8nQ9P3",
    "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3v",
    "Tk7fS8uZfz5hJ2Q=",
]


def test_window_inside_a_private_key_without_begin_or_end() -> None:
    window = ["step 10 loss 0.3", PEM64[1], PEM64[2], PEM64[3]]
    assert redact.lines(window) == ["step 10 loss 0.3", REDACTED, REDACTED, REDACTED]
    assert redact.lines(PEM64[1:3]) == [REDACTED, REDACTED]


@pytest.mark.parametrize(
    "noise",
    [
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",  # sha256 hex
        "x" * 64,
        "2025-01-01 12:00:00 INFO MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIB",
        "aGVsbG8gd29ybGQgdGhpcyBpcyBhIGJhc2U2NCBsaW5lIG9mIG90aGVyIGxlbmd0aA",  # 66 chars
        "Tk7fS8uZfz5hJ2Q=",  # a short base64 tail with no key line before it
    ],
)
def test_window_keeps_ordinary_noise(noise: str) -> None:
    assert redact.lines(["a", noise, "b"]) == ["a", noise, "b"]


def test_window_with_begin_still_redacts_the_block() -> None:
    rows = ["-----BEGIN PRIVATE KEY-----", PEM64[0], PEM64[1]]
    out = redact.lines(rows)
    assert not any(PEM64[0][:20] in row or PEM64[1][:20] in row for row in out)


def test_scrub_a_dumped_fact() -> None:
    fact = {"kind": "fact", "key": "api_key", "text": "canary-fact-9901", "n": 1}
    out = redact.scrub(fact)
    assert out == {"kind": "fact", "key": "api_key", "text": REDACTED, "n": 1}
    assert redact.text("canary-fact-9901") == REDACTED, "and learned"
    plain = {"kind": "fact", "key": "gpu_count", "text": "eight GPUs"}
    assert redact.scrub(plain) == plain


def test_a_harness_prompt_is_neither_redacted_nor_learned() -> None:
    """`claude -p PROMPT` seen on the machine: the prompt stays, and is not learned, so the
    user's words read as they were typed wherever else they show."""
    prompt = "Get the shop app serving on a port"
    assert redact.argv(["claude", "-p", prompt]) == ["claude", "-p", prompt]
    assert redact.text(f'cd shop && claude -p "{prompt}"') == f'cd shop && claude -p "{prompt}"'
    assert redact.text(prompt) == prompt
