"""Facts tied together: which process writes a log and how much of it is fresh; whether a
watched library is the one the running process maps (real processes, real files)."""

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pydantic
from ctxd.collectors import CollectContext, artifacts, logs, processes
from ctxd.models import (
    ArtifactWatch,
    LogsSection,
    LogWatch,
    Observations,
    ProcessWatch,
    Snapshot,
    SnapshotHeader,
    Watch,
)
from ctxd.render.markdown import render_dump
from ctxd.settings import Settings
from ctxd.snapshotter.snapshotter import name_log_writers

from tests.conftest import asleep, tagged, wait_until

# Prints a line, waits for a file to appear, prints another, then sleeps.
CHATTY = """
import os, sys, time
print("loading", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
print("ready", flush=True)
time.sleep(60)
"""


def watch(spec, watch_id: int) -> Watch:
    return Watch(id=watch_id, session="s", created_at=datetime.now(UTC), spec=spec)


def logs_part(section: LogsSection) -> str:
    header = SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t")
    markdown = render_dump(Snapshot(header=header, observations=Observations(logs=section)))
    return markdown.split("## Logs\n", 1)[1].split("\n## ", 1)[0]


def collect(*watches: Watch) -> LogsSection:
    return logs.collect(list(watches), CollectContext(settings=Settings()))


def test_a_log_written_through_stdout_since_launch_is_fresh(spawn, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("an earlier run's output that the launch truncates\n" * 10)
    go = tmp_path / "go"
    tag = f"ctxd-tie-{uuid.uuid4().hex[:10]}"
    with open(log, "w") as out:  # `cmd > server.log 2>&1`
        proc = spawn(sys.executable, "-c", CHATTY, str(go), tag, stdout=out,
                     stderr=subprocess.STDOUT)  # fmt: skip
    go.touch()
    wait_until(lambda: "ready" in log.read_text(), "the child's second line")
    section = collect(watch(LogWatch(path=str(log)), 1), watch(ProcessWatch(match=tag), 2))
    (info,) = section.items
    assert info.writer_pid == proc.pid and info.writer_streams == "its stdout and stderr"
    assert not info.writer_appends and info.written_since_start == info.size == 14
    text = logs_part(section)
    assert f"Written by pid {proc.pid} python" in text
    assert "all 14 B written since it opened the file: fresh" in text


# Names its main thread as torchrun names its own (`pt_elastic`), then prints and sleeps.
RENAMED = """
import ctypes, time
ctypes.CDLL(None).prctl(15, b"pt_elastic", 0, 0, 0)  # PR_SET_NAME: /proc/PID/comm
print("ranks up", flush=True)
time.sleep(60)
"""


def test_a_log_writer_is_named_as_the_process_table_names_it(spawn, tmp_path: Path) -> None:
    """torchrun's main thread is called pt_elastic: the writer line said "pid N pt_elastic"
    beside a process table that calls the same pid `torchrun` (a reader: one process, two
    names)."""
    script, log = tmp_path / "launcher.py", tmp_path / "launch.log"
    script.write_text(RENAMED)
    tag = f"ctxd-tie-{uuid.uuid4().hex[:10]}"
    with log.open("w") as out:
        proc = spawn(sys.executable, str(script), tag, stdout=out, stderr=subprocess.STDOUT)
    wait_until(lambda: "ranks up" in log.read_text(), "the launcher's line")
    assert Path(f"/proc/{proc.pid}/comm").read_text().strip() == "pt_elastic"
    watches = [watch(LogWatch(path=str(log)), 1), watch(ProcessWatch(match=tag), 2)]
    ctx = CollectContext(settings=Settings())
    observed = Observations(
        processes=processes.collect(watches, ctx), logs=logs.collect(watches, ctx)
    )
    name_log_writers(observed)  # as the snapshotter does once its collectors have run
    header = SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t")
    text = render_dump(Snapshot(header=header, observations=observed))
    name = f"{Path(sys.executable).name} launcher.py"
    assert f"| {proc.pid} (top of its tree) |" in text and name in text
    assert f"Written by pid {proc.pid} {name} (its stdout and stderr" in text
    assert "pt_elastic (its" not in text


def test_an_appended_log_is_said_to_hold_older_output(spawn, tmp_path: Path) -> None:
    log = tmp_path / "append.log"
    log.write_text("yesterday's run\n")
    go = tmp_path / "go"
    with open(log, "a") as out:  # `cmd >> append.log`
        proc = spawn(sys.executable, "-c", CHATTY, str(go), stdout=out)
    go.touch()
    wait_until(lambda: "ready" in log.read_text(), "the child's second line")
    # no process watch: the writer is found by walking every process
    section = collect(watch(LogWatch(path=str(log)), 1))
    (info,) = section.items
    assert info.writer_pid == proc.pid and info.writer_streams == "its stdout"
    assert info.writer_appends and info.written_since_start is None
    text = logs_part(section)
    assert "it appends to the file (`>>`), so older output may come before its own" in text
    assert "its last write came after it started" in text


def test_a_log_older_than_the_running_launch_is_stale(spawn, tmp_path: Path) -> None:
    log = tmp_path / "old.log"
    log.write_text("Load weight end.\n")
    old = time.time() - 600
    os.utime(log, (old, old))
    tag = f"ctxd-stale-{uuid.uuid4().hex[:10]}"
    proc = spawn(sys.executable, "-c", "import time; time.sleep(60)", tag)
    wait_until(lambda: asleep(proc.pid, "nanosleep"), "the watched process started")
    section = collect(watch(LogWatch(path=str(log)), 1), watch(ProcessWatch(match=tag), 2))
    (info,) = section.items
    assert info.writer_pid is None and info.newest_root_pid == proc.pid
    text = logs_part(section)
    assert "No running process has it open for writing; its last write came before" in text
    assert f"the watched pid {proc.pid} started" in text and "stale" in text


def test_a_stale_log_is_dated_against_the_launch_not_its_later_worker(
    spawn, tmp_path: Path
) -> None:
    """A worker forked after its launcher shares its command line, so the watch selects it
    too; the log predates the launch, and "the watched pid N started" named the worker (a
    new user's reader: "compares against a worker, not the parent")."""
    log = tmp_path / "old.log"
    log.write_text("ValueError: --workers 512\n")
    old = time.time() - 600
    os.utime(log, (old, old))
    tag = f"ctxd-stale-{uuid.uuid4().hex[:10]}"
    forks = "import os, time; time.sleep(1.2); os.fork(); time.sleep(60)"
    proc = spawn(sys.executable, "-c", forks, tag)
    try:
        wait_until(lambda: len(tagged(tag)) == 2, "the launcher's worker, a second later")
        section = collect(watch(LogWatch(path=str(log)), 1), watch(ProcessWatch(match=tag), 2))
        (info,) = section.items
        assert info.newest_root_pid == proc.pid, (info.newest_root_pid, tagged(tag))
    finally:
        for pid in tagged(tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


LOADS_SSL = """
import _ssl, sys, time
print(_ssl.__file__, flush=True)
time.sleep(60)
"""


def artifacts_part(watches: list[Watch], roots: list[Path]) -> tuple[list, str]:
    """The artifacts section and its text, watching under `roots` only: the default roots
    (home, /tmp, the working directory) hold the interpreter's files on one machine, not on
    another."""
    settings = Settings(watch_roots=roots)
    section = artifacts.collect(watches, CollectContext(settings=settings))
    header = SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t")
    markdown = render_dump(Snapshot(header=header, observations=Observations(artifacts=section)))
    return section.items, markdown.split("## Artifacts\n", 1)[1].split("\n## ", 1)[0]


def test_a_watched_library_is_said_to_be_mapped_or_not(spawn, tmp_path: Path) -> None:
    tag = f"ctxd-maps-{uuid.uuid4().hex[:10]}"
    proc = spawn(sys.executable, "-c", LOADS_SSL, tag, stdout=subprocess.PIPE, text=True)
    library = proc.stdout.readline().strip()
    copy = tmp_path / os.path.basename(library)  # the same library, built elsewhere
    copy.write_bytes(Path(library).read_bytes())
    process = watch(ProcessWatch(match=tag), 1)
    items, text = artifacts_part(
        [process, watch(ArtifactWatch(path=library), 2), watch(ArtifactWatch(path=str(copy)), 3)],
        roots=[Path(os.path.realpath(library)).parent, tmp_path],
    )
    used = {i.path: i.in_use for i in items}
    assert used[os.path.realpath(library)] == f"mapped by the watched pid {proc.pid}"
    assert used[str(copy)] == (
        f"not this file: the watched pid {proc.pid} maps another copy, {os.path.realpath(library)}"
    )
    assert (
        "Whether what runs uses them:" in text and f"mapped by the watched pid {proc.pid}" in text
    )


def test_a_watched_wheel_is_compared_with_what_the_process_imports(spawn, tmp_path: Path) -> None:
    tag = f"ctxd-wheel-{uuid.uuid4().hex[:10]}"
    proc = spawn(sys.executable, "-c", "import time; time.sleep(60)", tag)
    wait_until(lambda: asleep(proc.pid, "nanosleep"), "the watched process started")
    wheel = tmp_path / "pydantic-0.0.1-py3-none-any.whl"
    wheel.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: only its name is read
    watched = [watch(ProcessWatch(match=tag), 1), watch(ArtifactWatch(path=str(wheel)), 2)]
    items, text = artifacts_part(watched, roots=[tmp_path])
    (info,) = items
    said = f"the watched pid {proc.pid} imports pydantic {pydantic.VERSION}: not this wheel's 0.0.1"
    assert info.in_use == said and said in text


def test_the_walk_for_a_writer_is_repeated_only_when_the_log_changed(spawn, tmp_path) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("done\n")
    ctx = CollectContext(settings=Settings())
    spec = watch(LogWatch(path=str(log)), 1)
    (first,) = logs.collect([spec], ctx).items
    assert first.writer_pid is None
    memory = ctx.memory["logs"].writers
    assert str(log) in memory.unwritten
    # opened for writing but nothing written: the log did not change, so it is not walked for
    holder = spawn(
        sys.executable, "-c", f"f = open({str(log)!r}, 'a'); import time; time.sleep(60)"
    )
    wait_until(lambda: asleep(holder.pid, "nanosleep"), "the holder to open the log")
    (second,) = logs.collect([spec], ctx).items
    assert second.writer_pid is None
    # it writes: the log changed, the walk runs again and finds it; then it is asked first
    holder.kill()
    holder.wait()
    with open(log, "a") as out:
        writer = spawn(sys.executable, "-c", CHATTY, str(tmp_path), stdout=out)
    wait_until(lambda: "ready" in log.read_text(), "the child's second line")
    (third,) = logs.collect([spec], ctx).items
    assert third.writer_pid == writer.pid and memory.last == {str(log): writer.pid}
    assert str(log) not in memory.unwritten


def test_a_writer_that_became_another_program_is_named_as_what_it_is_now(
    spawn, tmp_path: Path
) -> None:
    """`bash -c 'nohup python3 … > log &'`: the shell opens the log, then becomes the program.
    A table read while it was still the shell must not name the log's writer `bash`."""
    log = tmp_path / "server.log"
    go = tmp_path / "go"
    tag = f"ctxd-exec-{uuid.uuid4().hex[:10]}"
    script = (f'while [ ! -e "{go}" ]; do sleep 0.05; done;'
              f' exec {sys.executable} -c "import time; print(1, flush=True); time.sleep(60)"'
              f" {tag}")  # fmt: skip
    with open(log, "w") as out:
        proc = spawn("bash", "-c", script, stdout=out, stderr=subprocess.STDOUT)
    watches = (watch(LogWatch(path=str(log)), 1), watch(ProcessWatch(match=tag), 2))
    time.sleep(0.5)  # settled as the shell in the shared process table
    assert collect(*watches).items[0].writer_name == "bash"
    go.touch()
    wait_until(lambda: log.read_text().strip() == "1", "the exec'd program's line")
    (info,) = collect(*watches).items
    assert info.writer_pid == proc.pid and info.writer_name.startswith("python"), info
