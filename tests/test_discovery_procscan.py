"""Workspace processes, their stdout/stderr files and what they listen on, on real children."""

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest
from ctxd.collectors import CollectContext, processes
from ctxd.discovery import procscan
from ctxd.models import ProcessesSection, ProcessWatch, Watch
from ctxd.settings import Settings

from tests.conftest import asleep, wait_until

SERVER = """
import socket, subprocess, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
           for _ in range(2)]
print("server up", flush=True)
time.sleep(60)
"""


def wait_for(predicate):  # type: ignore[no-untyped-def]
    return wait_until(predicate)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path, int]]:
    work = tmp_path / "work"
    work.mkdir()
    script = work / "serve.py"
    script.write_text(SERVER)
    log = work / "server.log"
    port_file = work / "port"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(port_file)],
            cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        port = int(wait_for(lambda: port_file.exists() and port_file.read_text()))
        wait_for(lambda: len(procscan.psutil.Process(proc.pid).children()) == 2)
        yield proc, work, port
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)


def test_the_server_tree_is_found_with_its_root(server: tuple) -> None:
    proc, work, _ = server
    found = procscan.workspace_processes([str(work)], min_age_s=0)
    tree = [c for c in found if c.root == proc.pid]
    assert len(tree) == 3  # the launcher and its two workers
    (root,) = procscan.roots(tree)
    assert root.pid == proc.pid and root.cwd == str(work)
    assert root.argv[1].endswith("serve.py")


def test_young_processes_and_other_folders_are_not_found(server: tuple, tmp_path: Path) -> None:
    proc, work, _ = server
    assert procscan.workspace_processes([str(work)], min_age_s=3600) == []
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert all(c.pid != proc.pid for c in procscan.workspace_processes([str(elsewhere)], 0))
    assert procscan.workspace_processes([], 0) == []
    assert procscan.workspace_processes(["/"], 0) == []


def test_argv_inside_the_workspace_counts_and_one_shot_tools_do_not(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    script = work / "job.py"
    script.write_text("import time; time.sleep(60)\n")
    job = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path)
    nap = subprocess.Popen(["sleep", "60"], cwd=work)
    try:
        found = wait_for(lambda: procscan.workspace_processes([str(work)], min_age_s=0))
        pids = {c.pid for c in found}
        assert job.pid in pids and nap.pid not in pids
    finally:
        for child in (job, nap):
            child.kill()
            child.wait(timeout=10)


def test_what_started_the_harness_and_the_harness_own_shells_are_not_found(
    tmp_path: Path,
) -> None:
    """`npx claude -p …` leaves `npm exec claude -p …` above the harness in the project's
    folder, with a shell between them and the harness's tool shell and its `sleep` below: none
    of them is the agent's work; the app the agent started from that shell is."""
    work, bin_dir = tmp_path / "shop", tmp_path / "bin"
    work.mkdir()
    bin_dir.mkdir()
    (work / "app.py").write_text("import time; time.sleep(60)\n")
    harness = bin_dir / "claude"  # the harness: runs the agent's command in a shell
    harness.write_text(
        f"#!{sys.executable}\nimport subprocess, time\n"
        "subprocess.Popen(['bash', '-c', 'python3 app.py & sleep 60'])\ntime.sleep(60)\n"
    )
    harness.chmod(0o755)
    (bin_dir / "wrapper.py").write_text("import subprocess, sys; subprocess.run(sys.argv[1:])\n")
    (bin_dir / "npm").symlink_to(sys.executable)  # a program of its own name, as npm is
    npm = subprocess.Popen(
        [str(bin_dir / "npm"), str(bin_dir / "wrapper.py"), "sh", "-c", f"{harness} -p 'why?'"],
        cwd=work, start_new_session=True,
    )  # fmt: skip
    try:

        def app() -> list[procscan.Candidate]:
            found = procscan.workspace_processes([str(work)], min_age_s=0)
            return found if any(c.argv[-1:] == ["app.py"] for c in found) else []

        found = wait_for(app)
        assert [c.argv[-1] for c in found] == ["app.py"], found
        assert psutil.Process(npm.pid).name() == "npm"  # not excluded by its own name
    finally:
        os.killpg(npm.pid, 9)
        npm.wait(timeout=10)


@pytest.mark.parametrize(
    ("name", "argv", "excluded"),
    [
        ("claude", ["claude", "--resume"], True),
        ("node", ["node", "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js"], True),
        ("opencode", ["opencode"], True),
        ("ctxd", ["/venv/bin/ctxd", "serve"], True),
        ("nvim", ["nvim", "a.py"], True),
        ("bash", ["bash"], True),
        ("git", ["git", "status"], True),
        ("python3", ["python3", "-m", "sglang.launch_server"], False),
        ("node", ["node", "server.js"], False),
    ],
)
def test_exclusions(name: str, argv: list[str], excluded: bool) -> None:
    assert procscan.is_excluded(name, argv) is excluded


def test_stdio_files_finds_the_redirect_target(server: tuple) -> None:
    proc, work, _ = server
    assert procscan.stdio_files(proc.pid) == [str(work / "server.log")]


def test_stdio_skips_pipes_and_deleted_files(tmp_path: Path) -> None:
    piped = subprocess.Popen(["sleep", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    doomed = tmp_path / "doomed.log"
    with open(doomed, "w") as out:
        deleted = subprocess.Popen(["sleep", "60"], stdout=out, stderr=subprocess.DEVNULL)
    doomed.unlink()
    try:
        assert procscan.stdio_files(piped.pid) == []
        assert procscan.stdio_files(deleted.pid) == []
    finally:
        for child in (piped, deleted):
            child.kill()
            child.wait(timeout=10)


def watched(pid: int) -> ProcessesSection:
    """What the process collector shows of a discovered tree, watched by its root's pid."""
    watch = Watch(id=1, session="s", created_at=datetime.now(UTC), spec=ProcessWatch(pid=pid))
    return processes.collect([watch], CollectContext(settings=Settings()))


def test_the_member_of_the_tree_that_listens_is_told(server: tuple) -> None:
    proc, _, port = server
    rows = {row.pid: row for row in watched(proc.pid).items}
    workers = procscan.psutil.Process(proc.pid).children()
    assert rows[proc.pid].listening == [port]
    assert [rows[worker.pid].listening for worker in workers] == [[], []]


def test_vanished_processes_are_outcomes_not_errors() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait(timeout=10)
    assert procscan.stdio_files(gone.pid) == []
    section = watched(gone.pid)
    assert section.items == [] and section.unavailable[0].reason.startswith("no process")


def test_a_working_directory_is_read_again_once_its_reading_is_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scan trusts a cwd read within CWD_MAX_AGE_S (5,000 readlinks a scan otherwise);
    a process that moved into the workspace is found once its reading is older."""
    outside, workspace = tmp_path / "outside", tmp_path / "ws"
    outside.mkdir()
    workspace.mkdir()
    code = "import os, sys, time; sys.stdin.readline(); os.chdir(os.environ['TO']); time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=outside,
        env={**os.environ, "TO": str(workspace)},  # not in argv: only its cwd may match
        stdin=subprocess.PIPE,
        text=True,
    )
    try:  # started, and waiting for its word outside the workspace
        wait_until(lambda: asleep(proc.pid, "read"), "the process reading its stdin")
        assert not procscan.workspace_processes([str(workspace)], min_age_s=0)
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        wait_until(lambda: os.readlink(f"/proc/{proc.pid}/cwd") == str(workspace), "moved")
        assert not procscan.workspace_processes([str(workspace)], min_age_s=0)  # trusted
        monkeypatch.setattr(procscan, "CWD_MAX_AGE_S", 0.0)
        found = procscan.workspace_processes([str(workspace)], min_age_s=0)
        assert [c.pid for c in found] == [proc.pid] and found[0].cwd == str(workspace)
    finally:
        proc.kill()
        proc.wait(timeout=10)


MOVER = """
import os, signal, time
signal.signal(signal.SIGUSR1, lambda *_: os.chdir(os.environ["MOVE_TO"]))
print("ready", flush=True)
time.sleep(60)
"""


def test_a_scan_tests_again_what_changed_and_in_whole_once_a_cwd_may_have_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two scans only the processes born or gone are tested against the workspace;
    one that moved into it unseen is found once its working directory is read again."""
    import signal

    monkeypatch.setattr(procscan, "CWD_MAX_AGE_S", 1.0)
    work = tmp_path / "work"
    work.mkdir()
    mover = subprocess.Popen(  # the folder is not in its arguments: it would be found by them
        [sys.executable, "-c", MOVER],
        env={**os.environ, "MOVE_TO": str(work)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert mover.stdout is not None and mover.stdout.readline() == "ready\n"
    try:
        assert procscan.workspace_processes([str(work)], min_age_s=0) == []
        with open(work / "out.log", "w") as out:  # born inside: found by the next scan
            born = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                    cwd=work, stdout=out)  # fmt: skip
        wait_for(lambda: [c.pid for c in procscan.workspace_processes([str(work)], 0)])
        os.kill(mover.pid, signal.SIGUSR1)
        found = wait_for(lambda: {c.pid for c in procscan.workspace_processes([str(work)], 0)}
                         - {born.pid})  # fmt: skip
        assert found == {mover.pid}
        born.kill()
        born.wait(timeout=10)
        wait_for(lambda: [c.pid for c in procscan.workspace_processes([str(work)], 0)]
                 == [mover.pid])  # fmt: skip
    finally:
        mover.kill()
        mover.wait(timeout=10)
        mover.stdout.close()  # type: ignore[union-attr]
