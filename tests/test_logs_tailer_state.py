"""A hypothesis state machine drives a real log file through write, rotate, truncate, delete."""

import os
import shutil
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from ctxd.collectors import CollectContext, logs
from ctxd.collectors._follow import Cursor, follow_path
from ctxd.models import LogWatch, Watch
from ctxd.settings import Limits, Settings
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule


class TailerMachine(RuleBasedStateMachine):
    """Model: which numbered lines are in the file and in its one rotated generation.

    Every read must deliver each line of the current file that was not delivered before,
    and, right after a single rotation, the rest of the old file; no line twice, in order.
    Lines lost to a truncation, a delete or a second rotation between reads are allowed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ctxd-tailer-"))
        self.path = self.dir / "app.log"
        self.limits = Limits()
        self.cursor: Cursor | None = None
        self.next = 0
        self.current: list[int] | None = []  # None: no file at the path
        self.rotated: list[int] = []
        self.rotations_since_read = 0
        self.replaced_since_read = False  # deleted or truncated: the cursor's file is gone
        self.delivered: set[int] = set()
        self.path.write_text("")
        self.ctx = CollectContext(settings=Settings())
        spec = LogWatch(path=str(self.path), lines=20)
        self.watch = Watch(id=1, session="s", created_at=datetime.now(UTC), spec=spec)

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(count=st.integers(min_value=1, max_value=30), width=st.integers(0, 200))
    def write(self, count: int, width: int) -> None:
        numbers = list(range(self.next, self.next + count))
        self.next += count
        with self.path.open("a") as f:
            f.write("".join(f"line {n} {'x' * width}\n" for n in numbers))
        self.current = [*(self.current or []), *numbers]

    @precondition(lambda self: self.current is not None)
    @rule()
    def rotate(self) -> None:
        os.replace(self.path, self.dir / "app.log.1")
        self.rotated = self.current or []
        self.path.write_text("")
        self.current = []
        self.rotations_since_read += 1

    @precondition(lambda self: self.current is not None)
    @rule()
    def truncate(self) -> None:
        os.truncate(self.path, 0)
        self.current = []
        self.replaced_since_read = self.replaced_since_read or self.rotations_since_read == 0

    @precondition(lambda self: self.current is not None)
    @rule()
    def delete(self) -> None:
        self.path.unlink()
        self.current = None
        self.replaced_since_read = self.replaced_since_read or self.rotations_since_read == 0

    @rule()
    def read(self) -> None:
        result = follow_path(str(self.path), self.cursor, self.limits)
        if isinstance(result, str):
            assert self.current is None and result == "no such file"
            return
        got = [int(line.split()[1]) for line in result.lines]
        assert not self.delivered.intersection(got), "a line was delivered twice"
        assert got == sorted(got), "lines out of order"
        expected_now = set(self.current or [])
        if self.rotations_since_read == 1 and not self.replaced_since_read and self.cursor:
            expected_now |= set(self.rotated)
        missing = expected_now - self.delivered - set(got)
        assert not missing, f"lost lines {sorted(missing)[:5]}"
        self.delivered.update(got)
        self.cursor = result.cursor
        self.rotations_since_read = 0
        self.replaced_since_read = False

    @rule()
    def collect_never_raises(self) -> None:
        section = logs.collect([self.watch], self.ctx)
        assert len(section.items) + len(section.unavailable) == 1
        for info in section.items:
            assert len(info.lines) <= 20


TailerMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_tailer_state_machine = TailerMachine.TestCase


def test_a_file_made_again_under_the_old_inode_with_the_same_bytes_at_the_offset_is_read_whole(
    tmp_path: Path,
) -> None:
    """Found by the state machine on a busy CI run: delete a log, write a new one, and the
    filesystem may give it the old inode; when its bytes before the old offset happen to be the
    same (equal-length lines of x's ending there), only its first line tells it apart."""
    path = tmp_path / "app.log"
    path.write_text("".join(f"line {n} {'x' * 83}\n" for n in range(10, 18)))  # 8 x 92 bytes
    first = follow_path(str(path), None, Limits())
    assert not isinstance(first, str)
    path.unlink()
    path.write_text("".join(f"line {n} {'x' * 83}\n" for n in range(20, 28)))  # same shape
    st = path.stat()
    reused = replace(first.cursor, dev=st.st_dev, ino=st.st_ino)  # as if the inode came back
    again = follow_path(str(path), reused, Limits())
    assert not isinstance(again, str)
    assert [line.split()[1] for line in again.lines] == [str(n) for n in range(20, 28)]
    assert again.event == "truncated"
