"""Hostile text from a watched process: relaunch blocks that run nothing hidden, and dumps,
pages and JSON that show control and bidi characters escaped (real processes, the real app)."""

import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ctxd import fmt, redact
from ctxd.collectors.proc import relaunch
from ctxd.render import html
from ctxd.render.markdown import environment as markdown_environment
from markupsafe import Markup

from .conftest import app_client

# Writes "ready" once it runs, then waits to be watched (and killed by its handle).
PROGRAM = """
import sys, time
open(sys.argv[sys.argv.index("--ready") + 1], "w").write("ready")
time.sleep(120)
"""

# Names a shell would run as commands if they reached a script unquoted (the red team's three).
HOSTILE_NAMES = {
    "RX_;touch PWN;X": "v1",
    "RX_$(touch PWN2)": "v2",
    "RX_\ntouch PWN3\nY": "v3",
    "RX_`touch PWN8`": "v8",
}
# Valid names whose values a terminal would act on, or that try to leave their quotes.
HOSTILE_VALUES = {
    "RX_TITLE": "\x1b]0;owned\x07",
    "RX_CLEAR": "before\x1b[2Jafter",
    "RX_BIDI": "safe\u202eexe.txt",
    "RX_C1": "csi\x9b31mred",
    "RX_QUOTE": "'; touch PWN4; '",
    "RX_SUBST": "$(touch PWN5)`touch PWN6`",
    "RX_LINES": "one\ntwo; touch PWN7",
}
RAW = ("\x1b", "\u202e", "\x9b", "\x07")


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 20
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never written"
        time.sleep(0.05)


def _strings(value: Any) -> Iterator[str]:
    """Every string of a decoded JSON document, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _pwned(root: Path) -> list[Path]:
    return sorted(root.rglob("PWN*"))


@pytest.fixture
def hostile(spawn, tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """A real process with hostile variable names and values, a hostile working directory and
    hostile argv words; its unique tag, its working directory and a sandbox to run blocks in."""
    tag = f"ctxd-round3-{uuid.uuid4().hex[:12]}"
    work = tmp_path / "run $(touch PWN9) ;x\x1b[2J\u202e"
    work.mkdir()
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    ready = tmp_path / "ready"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RX_")}
    env.update(HOSTILE_NAMES)
    env.update(HOSTILE_VALUES)
    with open(tmp_path / "out.log", "w") as out:
        spawn(sys.executable, "-c", PROGRAM, tag, "--ready", str(ready),
              "$(touch PWN10)", "\x1b]0;argv\x07", "a\u202eb", "x\ny; touch PWN11",
              cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    _wait_for(ready)
    yield tag, work, sandbox


def test_a_hostile_process_yields_a_safe_relaunch_block_and_escaped_text(
    hostile: tuple[str, Path, Path], tmp_path: Path
) -> None:
    tag, work, sandbox = hostile
    data = tmp_path / "data"
    with app_client(data) as c:
        assert c.put("/api/sessions/hx", json={}).status_code == 201
        spec = {"kind": "process", "match": tag, "env": ["RX_*"]}
        assert c.post("/api/sessions/hx/watches", json=spec).status_code == 201
        r = c.post("/api/sessions/hx/snapshots", json={"force": True})
        assert r.status_code == 201, r.text
        version = r.json()["header"]["version"]
        served = c.get(f"/api/sessions/hx/snapshots/{version}")
        markdown = c.get(f"/api/sessions/hx/snapshots/{version}/markdown").text
        page = c.get(f"/s/hx/v/{version}")
        session_page = c.get("/s/hx")
    assert served.status_code == 200 and page.status_code == 200, page.text[:300]
    assert session_page.status_code == 200
    items = served.json()["observations"]["processes"]["items"]
    (root,) = [p for p in items if p["root"] and tag in p["argv"]]
    block: list[str] = root["relaunch"]
    script = "\n".join(block)

    # The variables with names no shell can take are left out, and the block says so.
    assert "# 4 selected variables left out: their names are not valid shell names" in block
    exported = {x.split("=", 1)[0] for x in block if x.startswith("export ")}
    assert exported == {f"export {name}" for name in HOSTILE_VALUES}
    assert "export RX_QUOTE=''\"'\"'; touch PWN4; '\"'\"''" in block
    assert "export RX_TITLE='\\x1b]0;owned\\x07'" in block
    assert f"cd {shlex.quote(fmt.printable(str(work)))}" in block  # quoted, escaped
    # 4 values, the directory and 2 argv words: written escaped, so not as it ran
    escaped = "# 7 values hold control characters, written here escaped (\\x1b): put them back"
    assert f"{escaped} before running" in block

    # (1) bash reads it, and running it (the program replaced by `true`) creates nothing.
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr
    program = shlex.quote(sys.executable)
    detached = "nohup " if block[-1].startswith("nohup ") else ""  # its output went to a file
    assert block[-1].startswith(detached + program + " -c ")
    runnable = [*block[:-1], detached + "true" + block[-1][len(detached + program) :]]
    ran = subprocess.run(
        ["bash", "-c", "\n".join(runnable)],
        cwd=sandbox,
        env={"PATH": os.environ["PATH"], "HOME": str(sandbox)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "syntax error" not in ran.stderr, ran.stderr
    assert _pwned(tmp_path) == []
    # and the same lines as the Markdown dump prints them for copy and paste
    fenced = markdown.split("To start it again as it ran", 1)[1].split("```sh\n", 1)[1]
    printed = fenced.split("\n```", 1)[0]
    assert printed == script
    assert subprocess.run(["bash", "-n"], input=printed, text=True).returncode == 0

    # (2) no raw ESC, C1 CSI, BEL or U+202E in the JSON, the Markdown or the pages.
    for text in (markdown, page.text, session_page.text, served.text, *_strings(served.json())):
        assert not any(ch in text for ch in RAW), [ch for ch in RAW if ch in text]
    dumps = list(data.rglob("*.md"))
    assert dumps, "no dump file written"
    for dump in dumps:
        assert not any(ch in dump.read_text() for ch in RAW), dump.name
    # shown escaped, one variable a line: a name's newlines cannot fake lines of the block
    assert "RX_\\ntouch PWN3\\nY=v3" in markdown
    assert "RX_BIDI=safe\\u202eexe.txt" in markdown and "RX_C1=csi\\x9b31mred" in markdown
    assert "\\x1b]0;argv\\x07" in markdown and "a\\u202eb" in markdown


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[2J", "\\x1b[2J"),
        ("a\x00b\x7f\x85", "a\\x00b\\x7f\\x85"),
        ("bidi \u202e\u2066\u2069\u200f\u061c", "bidi \\u202e\\u2066\\u2069\\u200f\\u061c"),
        ("line\u2028sep", "line\\u2028sep"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("lone\rcr", "lone\\rcr"),
        ("crlf\r\nends\r\n", "crlf\nends\n"),
        ("tab\tand\nnewline", "tab\tand\nnewline"),
        ("ü🙂 中文 עברית", "ü🙂 中文 עברית"),
        # invisible: `s\u200bleep` reads as `sleep` (issue 39)
        ("s\u200bleep \ufeff\u2060\u00ad\u200d", "s\\u200bleep \\ufeff\\u2060\\xad\\u200d"),
        ("already \\x1b escaped", "already \\x1b escaped"),
    ],
)
def test_observed_text_reads_with_its_control_and_bidi_characters_escaped(
    raw: str, shown: str
) -> None:
    assert fmt.printable(raw) == shown
    assert redact.text(raw) == shown
    assert redact.text(redact.text(raw)) == redact.text(raw)
    assert redact.text(raw * 300) == shown * 300  # the long path (not cached) does the same


def test_every_character_printable_escapes_is_one_python_calls_unprintable() -> None:
    # printable() returns a text Python calls printable as it is, without its patterns: so
    # no character they escape may be printable to Python, whichever is added to them
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        if char.isprintable():
            assert not fmt._UNSEEN_IN_LINE.search(char), hex(point)
            assert not fmt._UNSEEN_IN_TEXT.search(char), hex(point)


def test_a_variable_name_is_one_line_and_a_secret_split_by_a_control_is_still_redacted() -> None:
    assert redact.env({"A\nB\tC": "x\ny"}) == {"A\\nB\\tC": "x\ny"}
    assert fmt.printable("A\nB", lines=False) == "A\\nB"
    token = "ghp_" + "Q7w8E9r0T1y2U3i4O5p6A7s8D9f0G1h2"
    assert token[4:] not in redact.text(f"PASSWORD=ab\x1f{token} rest")
    assert redact.argv(["tool", "--pass\x1bword=hunter22", "\x1b]0;t\x07"]) == [
        "tool",
        "--pass\\x1bword=[REDACTED]",
        "\\x1b]0;t\\x07",
    ]


def test_every_part_of_a_block_is_quoted_or_refused() -> None:
    lines = relaunch.block(
        ["X=1", "touch", "PWN"], "/srv/a b", {"OK_A": "1", "OK_B;rm": "2", "OK_C": "\x1b[2J"},
        ("OK_*",), pid=-1, login={"OK_GONE": "1", "OK_$(x)": "2"},
    )  # fmt: skip
    assert lines == [
        "# 2 selected variables left out: their names are not valid shell names",
        "# 1 value holds control characters, written here escaped (\\x1b): put it back before "
        "running",
        "cd '/srv/a b'",
        "unset OK_GONE",
        "export OK_A=1",
        "export OK_C='\\x1b[2J'",
        "'X=1' touch PWN",  # an assignment-shaped first word would not be the program
    ]
    assert subprocess.run(["bash", "-n"], input="\n".join(lines), text=True).returncode == 0
    assert relaunch.block(["if", "true"], None, None, (), pid=-1, login={})[-1] == "'if' true"


def test_a_line_the_redactor_would_requote_reads_redacted_or_is_left_out() -> None:
    """The runner redacts each line again: a rule that took part of a quoted word with it
    (`PASSWORD='`, `-p 'a b'`) would leave quotes unbalanced, and a name holding a known
    secret would show it. Such a word reads [REDACTED]; a name cannot, so its line goes."""
    secret = "Zq" + uuid.uuid4().hex
    redact.learn_env({"X_PASSWORD": secret})
    lines = relaunch.block(
        ["prog", "-p", "a b'; touch PWN", "x"], "/srv/PASSWORD='", {"OK_" + secret: "v"},
        ("OK_*",), pid=-1, login={},
    )  # fmt: skip
    assert lines == [
        "# 2 values read [REDACTED]: fill in the real value before running",
        "# 1 line left out: redaction would change how a shell reads it",
        "cd '[REDACTED]'",
        "prog -p '[REDACTED]' x",
    ]
    again = redact.scrub(lines)  # what the snapshot keeps
    assert secret not in "\n".join(again)
    assert subprocess.run(["bash", "-n"], input="\n".join(again), text=True).returncode == 0


def test_pages_and_dumps_escape_what_never_passed_the_redactor() -> None:
    page = html.ENV.from_string("{{ a }}|{{ b }}|{{ c | safe }}|{{ n }}")
    out = page.render(a="\x1b[2J<b>", b=Markup("<i>\u202e</i>"), c="<u>\x07</u>", n=3)
    assert out == "\\x1b[2J&lt;b&gt;|<i>\\u202e</i>|<u>\\x07</u>|3"
    dump = markdown_environment().from_string("{{ a }} {{ b | inline }}\n{{ c | fence }}")
    out = dump.render(a="\x1b]0;t\x07", b="\u202e", c=["x\x9by", "ok"])
    assert out == "\\x1b]0;t\\x07 `\\u202e`\n```text\nx\\x9by\nok\n```"
