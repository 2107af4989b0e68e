"""Learned secret values survive a restart as keyed digests, never in clear."""

import base64
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from ctxd import redact
from ctxd.redact import REDACTED
from ctxd.redact import known as redact_known
from ctxd.redact import learned as redact_learned

VALUE = "pw/Secret+99&zz"


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    redact._text_short.cache_clear()
    redact_known.forget_all()
    redact_learned.forget_all()
    yield
    redact._text_short.cache_clear()
    redact_known.forget_all()
    redact_learned.forget_all()


def _restart(data: Path) -> None:
    redact._text_short.cache_clear()
    redact_known.forget_all()
    redact_learned.forget_all()
    redact.load_learned(data)


def test_a_learned_value_is_redacted_after_a_restart(tmp_path: Path) -> None:
    redact.load_learned(tmp_path)
    redact.env({"DATABASE_URL": f"postgres://u:{quote(VALUE, safe='')}@h/db"})
    _restart(tmp_path)
    b64 = base64.b64encode(VALUE.encode()).decode()
    for line in (f"saw {VALUE} again", f"GET /x?k={quote(VALUE, safe='')}", f"blob {b64}."):
        assert redact.text(line).count(REDACTED) == 1, line


def test_nothing_is_stored_in_clear_and_files_are_private(tmp_path: Path) -> None:
    redact.load_learned(tmp_path)
    redact.learn(VALUE)
    for name in (redact_learned.KEY_FILE, redact_learned.DIGESTS_FILE):
        path = tmp_path / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
        raw = path.read_bytes()
        for form in redact_learned.forms(VALUE):
            assert form.encode() not in raw


def test_a_value_known_again_costs_no_scan(tmp_path: Path) -> None:
    redact.load_learned(tmp_path)
    redact.learn(VALUE)
    _restart(tmp_path)
    assert redact_learned._pending
    redact.learn(VALUE)
    assert not redact_learned._pending


def test_restart_in_a_real_process(tmp_path: Path) -> None:
    """A fresh interpreter, as after a restart: only the files carry the knowledge."""
    redact.load_learned(tmp_path)
    redact.argv(["mysql", "-p", "Hunter2Secret"])
    code = (
        "import sys; from pathlib import Path; from ctxd import redact; "
        "redact.load_learned(Path(sys.argv[1])); print(redact.text('log: Hunter2Secret ok'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"log: {REDACTED} ok"
