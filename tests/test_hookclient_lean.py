"""The hook client runs inside the agent's process on every event: it imports nothing of the
server (no ctxd.harness, ctxd.cli, ctxd.discovery, pydantic, litestar, httpx), and the command
an install writes imports nothing on its way that costs a hook its time (json's `re`, socket's
enum and selectors, urllib, pathlib, typing), against a real server. Its own JSON and URL
readers say what json and urllib say."""

import ast
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from ctxd.harness.adapter import hook_command
from ctxd.hookclient import jsontext, request

from tests.conftest import Server

HOOKCLIENT = Path(__file__).resolve().parents[1] / "service" / "ctxd" / "hookclient"
SERVER_MODULES = ("ctxd.harness", "ctxd.cli", "ctxd.discovery", "pydantic", "litestar", "httpx")
COSTLY = (
    "re",
    "json",
    "socket",
    "urllib",
    "pathlib",
    "typing",
    "enum",
    "selectors",
    "encodings.idna",
)


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter (no site, no environment) holds after `code`."""
    root = str(HOOKCLIENT.parents[1])
    probe = f"import sys; sys.path.insert(0, {root!r}); {code}; print(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-S", "-I", "-c", probe], capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    return set(done.stdout.split())


def of(modules: set[str], names: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == n or m.startswith(n + ".") for n in names)}


def test_every_module_of_the_hook_client_imports_nothing_of_the_server() -> None:
    modules = [f"ctxd.hookclient.{p.stem}" for p in HOOKCLIENT.glob("*.py") if p.stem != "__main__"]
    loaded = loaded_after("import " + ", ".join(modules))
    assert {"ctxd.hookclient.hook", "ctxd.hookclient.autostart"} <= loaded
    assert of(loaded, SERVER_MODULES) == set()


def test_its_source_names_no_module_of_ctxd_outside_the_package() -> None:
    for path in HOOKCLIENT.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                inside = name in ("ctxd", "ctxd.hookclient") or name.startswith("ctxd.hookclient.")
                assert inside or not name.startswith("ctxd"), f"{path.name} imports {name}"


def test_the_installed_command_imports_nothing_costly_on_its_way(
    server: Server, tmp_path: Path
) -> None:
    argv = shlex.split(hook_command("codex", server.url))
    assert argv[1:3] == ["-S", "-I"] and argv[3].endswith("hookclient/__main__.py")
    assert argv[-2:] == ["hook", "codex"]  # told as ctxd's by its end, as `ctxd hook codex`
    event = {"hook_event_name": "PostToolUse", "session_id": "c1", "cwd": str(tmp_path),
             "tool_name": "Bash", "tool_input": {"command": "ls"},
             "tool_response": "a\n"}  # fmt: skip
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], input=json.dumps(event),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout == ""
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "ctxd.hookclient.hook" in imported
    said = [line for line in done.stderr.splitlines() if "|" not in line]
    assert said == []  # it reached the service, which recorded the call
    assert of(imported, COSTLY) == set() and of(imported, SERVER_MODULES) == set()
    sessions = server.client().get("/api/sessions").json()
    assert [s["cwd"] for s in sessions] == [str(tmp_path)]


DOCUMENTS = [
    '{"a": [1, 2.5, -3e10, true, false, null, "x\\u00e9\\n\\ud83d\\ude00"], "b": {}}',
    '  [1, {"k": [[]]}]  \n',
    '"text"',
    "12345678901234567890123",
    '{"big": 1e400, "small": -1e-400}',
    "[NaN, Infinity, -Infinity]",
    '{"same": 1, "same": 2}',
]
BROKEN = ["", "   ", "{", "[1,]", '{"a" 1}', "[1] x", "nul", '"unterminated', '{"a": 1}}']


@pytest.mark.parametrize("text", DOCUMENTS)
def test_its_json_reads_what_json_reads(text: str) -> None:
    ours, theirs = jsontext.loads(text), json.loads(text)
    assert repr(ours) == repr(theirs)  # NaN compares unequal to itself: compared as written
    assert jsontext.dumps(theirs) == json.dumps(theirs)


@pytest.mark.parametrize("text", BROKEN)
def test_its_json_refuses_what_json_refuses_with_the_same_words(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as ours:
        jsontext.loads(text)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    assert (ours.value.msg, ours.value.pos) == (theirs.value.msg, theirs.value.pos)


def test_its_json_writes_what_json_writes() -> None:
    value = {"é": ["\u2028", 1.5, math.inf, None, True], "n": {"1": -0.0}}
    assert jsontext.dumps(value) == json.dumps(value)
    with pytest.raises(TypeError, match="not JSON serializable"):
        jsontext.dumps({"a": object()})


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8765",
        "http://127.0.0.1:8765/",
        "https://ctxd.example.org/base/path?x=1#top",
        "http://[::1]:18411/api",
        "http://LOCALHOST:80",
        "http://user:pw@node2:9000/p",
        "http://node2",
    ],
)
def test_its_url_reader_reads_what_urlsplit_reads(url: str) -> None:
    parts = urlsplit(url)
    assert request.split(url) == (parts.scheme, parts.hostname, parts.port, parts.path)
