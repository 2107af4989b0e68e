import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from ctxd.collectors import CollectContext, processes
from ctxd.collectors.proc import procrows
from ctxd.collectors.proc.argv import parse_flags
from ctxd.collectors.proc.procstatic import DEFAULT_ENV, select
from ctxd.models import Flag, PortWatch, ProcessWatch, Watch
from ctxd.settings import Limits, Settings

from tests.conftest import wait_until

# The child starts a grandchild and reports its pid, so the test knows the tree is complete.
PARENT = """
import subprocess, sys, time
grand = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(grand.pid, flush=True)
time.sleep(120)
"""
SECRET = "sk-test-0123456789abcdefghij"


def watch(wid: int = 1, **spec: Any) -> Watch:
    return Watch(id=wid, session="t", created_at=datetime.now(UTC), spec=ProcessWatch(**spec))


def context(**limits: Any) -> CollectContext:
    return CollectContext(settings=Settings(limits=Limits(**limits)))


@pytest.fixture
def tree() -> Iterator[tuple[subprocess.Popen[str], int, str]]:
    """A server-like child with flags and environment, and its grandchild; both reaped after."""
    tag = f"ctxd-test-{uuid.uuid4().hex}"
    argv = [sys.executable, "-c", PARENT, "--tp", "2", "--port", "8000"]
    argv += ["--disable-cuda-graph", "--api-key", SECRET, "--tag", tag]
    env = {**os.environ, "HF_TOKEN": "hf_secretvalue123456", "NCCL_DEBUG": "INFO"}
    env |= {"APP_MODE": "canary", "LANG_SEEN": "x"}
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    grand = 0
    try:
        assert child.stdout is not None
        grand = int(child.stdout.readline())
        yield child, grand, tag
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            leaf = psutil.Process(grand)
            if leaf.ppid() == child.pid:  # not a stranger that reused the pid
                leaf.kill()
        child.kill()
        child.wait(timeout=10)
        child.stdout.close()  # type: ignore[union-attr]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_match_finds_root_with_flags_env_and_descendant(tree) -> None:
    child, grand, tag = tree
    section = processes.collect([watch(match=re.escape(tag))], context())

    assert section.unavailable == []
    by_pid = {row.pid: row for row in section.items}
    assert set(by_pid) == {child.pid, grand}
    root, leaf = by_pid[child.pid], by_pid[grand]
    assert root.root and not leaf.root
    assert leaf.ppid == child.pid
    assert root.state in ("sleeping", "running")
    assert root.user == psutil.Process().username()
    assert root.rss_bytes and root.threads
    assert root.started_at.tzinfo is not None and root.age_s >= 0
    assert Flag(name="--tp", value="2") in root.flags
    assert Flag(name="--port", value="8000") in root.flags
    assert Flag(name="--disable-cuda-graph", value=None) in root.flags
    assert root.env["NCCL_DEBUG"] == "INFO"
    assert root.env["HF_TOKEN"] == "[REDACTED]"
    assert leaf.env == {}


def test_env_patterns_add_variables_to_the_default_ones(tree) -> None:
    """A watch's names are shown besides the defaults: a launch's `export APP_MODE=x` and the
    debugging families both show, secrets redacted; what neither names stays out."""
    child, _, _ = tree
    section = processes.collect([watch(pid=child.pid, env=["APP_*", "HF_TOKEN"])], context())
    env = section.items[0].env
    assert env["APP_MODE"] == "canary" and env["NCCL_DEBUG"] == "INFO"
    assert env["HF_TOKEN"] == "[REDACTED]" and "LANG_SEEN" not in env


def test_default_env_keeps_the_relevant_names_only() -> None:
    """A watch that names no `env` keeps what changes how GPU / ML servers behave."""
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "LANG": "C", "NCCL_DEBUG": "INFO", "TERM": "x"}
    env |= {"APP_DEBUG": "1", "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "DEBUGGER": "x"}
    env |= {"NVPL_BLAS_DEBUG_CPU_TYPE": "1"}  # a library's own switch, not a log level
    assert select(env, DEFAULT_ENV) == {
        "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO", "APP_DEBUG": "1",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    }  # fmt: skip


def test_pid_watch_without_children(tree) -> None:
    child, _, _ = tree
    section = processes.collect([watch(pid=child.pid, children=False)], context())
    assert [(row.pid, row.root) for row in section.items] == [(child.pid, True)]


def test_overlapping_watches_do_not_duplicate(tree) -> None:
    child, grand, tag = tree
    watches = [watch(1, pid=child.pid), watch(2, match=re.escape(tag))]
    section = processes.collect(watches, context())
    assert sorted(row.pid for row in section.items) == sorted([child.pid, grand])
    assert {row.watch_id for row in section.items} == {1}
    assert section.unavailable == []


def test_rows_bounded_per_watch(tree) -> None:
    child, _, tag = tree
    section = processes.collect([watch(match=re.escape(tag))], context(processes_per_watch_max=1))
    assert [row.pid for row in section.items] == [child.pid]
    assert "first 1 of 2" in section.unavailable[0].reason


def test_missing_pid_and_unmatched_pattern_are_unavailable() -> None:
    pattern = f"no-such-process-{uuid.uuid4().hex}"
    section = processes.collect([watch(1, pid=2**22), watch(2, match=pattern)], context())
    assert section.items == []
    reasons = {u.watch_id: u.reason for u in section.unavailable}
    assert reasons == {1: f"no process with pid {2**22}", 2: f"no process matches /{pattern}/"}


def test_an_automatic_watch_whose_process_ended_is_no_warning() -> None:
    """ctxd's own watch of a program the agent ran (`make wheel`, seen running by a scan) is
    no "no process matches" warning once the program is done: its attempt, where it has one,
    says how it ended, and the watch retires."""
    pattern = f"no-such-process-{uuid.uuid4().hex}"
    mine = watch(1, match=pattern)
    guessed = watch(2, match=pattern).model_copy(update={"auto": True})
    section = processes.collect([mine, guessed], context())
    assert [u.watch_id for u in section.unavailable] == [1]


def test_own_process_and_ancestors_are_not_matched() -> None:
    own = psutil.Process()
    excluded = {own.pid, *(p.pid for p in own.parents())}
    # its start only: a pattern is capped at 500 characters, a pytest command line is not
    pattern = re.escape(" ".join(own.cmdline())[:200])
    section = processes.collect([watch(match=pattern)], context())
    assert not excluded.intersection(row.pid for row in section.items if row.root)


def test_busy_process_has_meaningful_cpu() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        ctx = context()
        first = processes.collect([watch(pid=busy.pid)], ctx)
        assert first.items[0].cpu_percent is not None
        handle = next(iter(ctx.memory[processes.NAME].handles.values()))
        # A shared machine may lend a spinning process little CPU in one 0.1 s sample: look
        # again until one sample shows it busy, rather than asserting on the first.
        deadline = time.monotonic() + 30
        while True:
            again = processes.collect([watch(pid=busy.pid)], ctx)
            cpu = again.items[0].cpu_percent
            if cpu is not None and cpu > 10:
                break
            assert time.monotonic() < deadline, f"never seen busy (last {cpu})"
        assert next(iter(ctx.memory[processes.NAME].handles.values())) is handle
    finally:
        busy.kill()
        busy.wait(timeout=10)


def test_zombie_is_reported_not_raised() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        zombie = lambda: psutil.Process(dead.pid).status() == psutil.STATUS_ZOMBIE  # noqa: E731
        wait_until(zombie, "the child a zombie")
        section = processes.collect([watch(pid=dead.pid)], context())
        assert [row.state for row in section.items] == ["zombie"]
        assert section.items[0].name
        assert section.unavailable == []
    finally:
        dead.wait(timeout=10)


def test_process_vanishing_between_collects(sleeper) -> None:
    ctx = context()
    assert len(processes.collect([watch(pid=sleeper.pid)], ctx).items) == 1
    assert len(ctx.memory[processes.NAME].handles) == 1
    sleeper.kill()
    sleeper.wait(timeout=10)
    section = processes.collect([watch(pid=sleeper.pid)], ctx)
    assert section.items == []
    assert section.unavailable[0].reason == f"no process with pid {sleeper.pid}"
    assert ctx.memory[processes.NAME].handles == {}


def test_process_vanishing_mid_collection(sleeper, monkeypatch) -> None:
    def vanish(proc: psutil.Process, *args: Any) -> Any:
        raise psutil.NoSuchProcess(proc.pid)

    monkeypatch.setattr(procrows, "_describe", vanish)
    section = processes.collect([watch(pid=sleeper.pid)], context())
    assert section.items == []
    assert section.unavailable[0].reason == f"no process with pid {sleeper.pid}"


def test_unexpected_error_becomes_unavailable(sleeper, monkeypatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(procrows, "_describe", broken)
    section = processes.collect([watch(pid=sleeper.pid)], context())
    assert "boom" in section.unavailable[0].reason


def test_other_watch_kinds_are_ignored() -> None:
    port = Watch(id=1, session="t", created_at=datetime.now(UTC), spec=PortWatch(port=8000))
    section = processes.collect([port], context())
    assert section.items == [] and section.unavailable == [] and section.matched == 0


def F(name: str | None, value: str | None = None) -> Flag:
    return Flag(name=name, value=value)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], []),
        (["server"], []),
        (["server", "--a=b"], [F("--a", "b")]),
        (["server", "--a", "b"], [F("--a", "b")]),
        (["server", "--flag", "--other"], [F("--flag"), F("--other")]),
        (["server", "--flag"], [F("--flag")]),
        (["server", "--offset", "-1"], [F("--offset", "-1")]),
        (["server", "--lr", "-1e-5"], [F("--lr", "-1e-5")]),
        (["server", "-a", "b"], [F("-a", "b")]),
        (["server", "-v", "-v"], [F("-v"), F("-v")]),
        (["server", "--x", "1", "--x", "2"], [F("--x", "1"), F("--x", "2")]),
        (["server", "model.bin"], [F(None, "model.bin")]),
        (["server", "--a", "--", "--b", "c"], [F("--a"), F(None, "--b"), F(None, "c")]),
        (["server", "--url=http://x/?a=b"], [F("--url", "http://x/?a=b")]),
        (["server", "-"], [F(None, "-")]),
        (
            ["/usr/bin/python3", "-m", "sglang.launch_server", "--tp", "8", "--log-level", "debug"],
            [F(None, "sglang.launch_server"), F("--tp", "8"), F("--log-level", "debug")],
        ),
        (
            ["python3.12", "-u", "-X", "dev", "train.py", "--epochs", "3"],
            [F("-u"), F("-X", "dev"), F(None, "train.py"), F("--epochs", "3")],
        ),
        (
            ["python", "-msglang.launch_server", "--port", "8000"],
            [F(None, "sglang.launch_server"), F("--port", "8000")],
        ),
        (["python", "-c", "print(1)", "--tp", "2"], [F("-c", "print(1)"), F("--tp", "2")]),
        (["python", "script.py", "-m", "x"], [F(None, "script.py"), F("-m", "x")]),
        (["python"], []),
        (["torchrun", "-m", "x"], [F("-m", "x")]),
    ],
)
def test_parse_flags(argv: list[str], expected: list[Flag]) -> None:
    assert parse_flags(argv) == expected


def test_match_by_executable_name(sleeper) -> None:
    name = os.path.basename(sys.executable)
    section = processes.collect([watch(name=name, children=False)], context())
    assert sleeper.pid in {row.pid for row in section.items}
    assert section.matched >= 1


def test_other_users_process_shows_not_permitted(tree) -> None:
    """ctxd run as `nobody` looking at a root-owned process: named limits, not empty fields."""
    child, _, _ = tree
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another user")
    import json

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, collect, report, never return into pytest
        try:
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            section = processes.collect([watch(pid=child.pid)], context())
            os.write(write, section.model_dump_json().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        data = json.loads(pipe.read() or "{}")
    os.waitpid(pid, 0)
    root = data["items"][0]
    assert root["pid"] == child.pid and root["env"] == {}
    assert {"environment", "open files and sockets"} <= set(root["not_permitted"])
    reasons = {(u["target"], u["reason"]) for u in data["unavailable"]}
    assert (f"pid {child.pid} environment", "not permitted") in reasons
    assert root["argv"]  # the command line is world-readable and still shown


def test_packages_from_the_process_own_environment(tmp_path) -> None:
    """Versions come from the watched interpreter's site-packages, not from ctxd's."""
    prefix = tmp_path / "venv"
    site = prefix / "lib" / "python3.99" / "site-packages"
    (site / "sglang-0.5.9.dist-info").mkdir(parents=True)
    (site / "flash_attn-2.8.3.dist-info").mkdir()
    (prefix / "bin").mkdir()
    (prefix / "bin" / "python").symlink_to(sys.executable)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    proc = subprocess.Popen([str(prefix / "bin" / "python"), "-c", "import time; time.sleep(60)"])
    try:
        spec = {"pid": proc.pid, "packages": ["sglang", "flash-attn", "torch"]}
        (row,) = processes.collect([watch(**spec)], context()).items
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert row.packages == {"sglang": "0.5.9", "flash-attn": "2.8.3", "torch": "not installed"}


def test_hundreds_of_matches_stay_readable() -> None:
    tag = f"ctxd-many-{uuid.uuid4().hex[:8]}"
    code = "import time; time.sleep(60)"
    procs = [subprocess.Popen([sys.executable, "-c", code, tag]) for _ in range(40)]
    try:
        section = processes.collect([watch(match=tag)], context())
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)
    assert section.matched == 40 and len(section.items) == 40
    assert 0 < len(section.featured) < 40


def test_workers_fold_by_rank() -> None:
    from ctxd.collectors.proc.argv import fold_workers

    argvs = [["python", "-m", "w", "--rank", str(r), "--port", "8000"] for r in range(8)]
    assert fold_workers([*argvs, ["python", "tokenizer.py"]]) == [
        (8, "python -m w --rank {0..7} --port 8000"),
        (1, "python tokenizer.py"),
    ]
    assert fold_workers([["w", f"--rank={r}"] for r in (8, 9, 10, 11)]) == [(4, "w --rank={8..11}")]
    # Only numbers fold: workers told apart by a name are different workers.
    assert fold_workers([["w", "--node", n] for n in ("a", "b")]) == [
        (1, "w --node a"), (1, "w --node b"),
    ]  # fmt: skip


def test_orphaned_workers_of_a_killed_launcher_stay_in_view(spawn, tmp_path) -> None:
    from ctxd.models import Observations

    pidfile = tmp_path / "worker.pid"
    code = (
        "import subprocess, sys, time; "
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pidfile)!r}, 'w').write(str(w.pid)); time.sleep(120)"
    )
    launcher = spawn(sys.executable, "-c", code, "--orphan-test-marker")
    worker = int(wait_until(lambda: pidfile.exists() and pidfile.read_text(), "the worker's pid"))
    watches = [
        Watch(id=1, session="t", created_at=datetime.now(UTC),
              spec=ProcessWatch(match="--orphan-test-marker"))
    ]  # fmt: skip
    ctx = CollectContext(settings=Settings(cpu_sample_s=0))
    first = processes.collect(watches, ctx)
    assert {p.pid for p in first.items} == {launcher.pid, worker}
    launcher.kill()
    launcher.wait()
    try:
        ctx.previous = Observations(processes=first)
        second = processes.collect(watches, ctx)
        assert [p.pid for p in second.items] == [worker]  # alive, re-parented, still shown
        assert [e.pid for e in second.exited] == [launcher.pid]
    finally:
        os.kill(worker, 9)


def test_a_backtracking_pattern_is_cut_off_not_waited_for(spawn) -> None:
    spawn(sys.executable, "-c", "import time; time.sleep(60)", "a" * 40 + "!")
    watches = [
        Watch(id=1, session="t", created_at=datetime.now(UTC),
              spec=ProcessWatch(match=r"(a|aa)+$"))
    ]  # fmt: skip
    section = processes.collect(watches, CollectContext(settings=Settings(cpu_sample_s=0)))
    (unavailable,) = section.unavailable
    assert "too slow" in unavailable.reason and unavailable.watch_id == 1
    # quarantined: the next look does not run it at all (a bad pattern costs one budget per
    # quarter hour, not one per probe), even on text it would have matched at once
    from ctxd.collectors import _patterns

    assert _patterns._quarantined(r"(a|aa)+$")
    with pytest.raises(_patterns.SlowPattern):
        _patterns.Budget().search(_patterns.compiled(r"(a|aa)+$"), "aa")
    again = processes.collect(watches, CollectContext(settings=Settings(cpu_sample_s=0)))
    assert "not run again" in again.unavailable[0].reason


def test_a_kept_description_follows_secrets_learned_later_and_the_watch_spec() -> None:
    """A process's command line and environment are described once and kept between
    snapshots; a value learned as a secret afterwards is redacted in the next one all the
    same, and a watch asking for other variables gets them at once."""
    from ctxd import redact

    tag = f"ctxd-kept-{uuid.uuid4().hex[:12]}"
    value = f"opaque{uuid.uuid4().hex}"
    env = {**os.environ, "KEPT_MODE": "fast", "NCCL_DEBUG": "INFO"}
    code = "import time; time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code, tag, "--label", value], env=env)
    try:
        ctx = context()
        rows = processes.collect([watch(match=tag)], ctx).items
        assert value in rows[0].argv and "KEPT_MODE" not in rows[0].env
        redact.learn_env({"KEPT_API_TOKEN": value})  # the same value, now known as a secret
        rows = processes.collect([watch(match=tag)], ctx).items
        assert value not in " ".join(rows[0].argv) and "[REDACTED]" in rows[0].argv
        rows = processes.collect([watch(match=tag, env=["KEPT_*"])], ctx).items
        assert rows[0].env["KEPT_MODE"] == "fast" and rows[0].env["NCCL_DEBUG"] == "INFO"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_matches_remembered_per_process_are_remembered_per_pattern(sleeper) -> None:
    """The process table remembers which patterns each process matched; another pattern
    over the same processes is still matched on its own."""
    ctx = context()
    pid = str(sleeper.pid)
    own = processes.collect([watch(pid=sleeper.pid)], ctx).items[0].argv
    code = re.escape(own[-1])  # "import time; time.sleep(120)"
    assert {r.pid for r in processes.collect([watch(match=code)], ctx).items} >= {sleeper.pid}
    other = processes.collect([watch(match=code + "-not-" + pid)], ctx)
    assert other.items == [] and other.matched == 0
    again = processes.collect([watch(match=code)], ctx).items
    assert sleeper.pid in {r.pid for r in again}


def test_a_snapshot_reads_the_process_table_afresh_after_a_probe() -> None:
    """Probes may share a process table read within the last second; a snapshot never does:
    a process started right after a probe is in the next snapshot, with its descriptors."""
    tag = f"ctxd-fresh-{uuid.uuid4().hex[:12]}"
    probe = CollectContext(settings=Settings(), probe=True)
    assert processes.collect([watch(match=tag)], probe).items == []
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", tag])
    try:
        rows = processes.collect([watch(match=tag)], context()).items
        assert [r.pid for r in rows] == [proc.pid] and rows[0].open_files
        probed = processes.collect([watch(match=tag)], probe).items  # shares that table
        assert [r.pid for r in probed] == [proc.pid] and probed[0].open_files is None
        assert probed[0].key == rows[0].key  # the same process to the events that compare keys
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_wrapper_that_calls_exec_later_is_seen_as_what_it_became(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`exec python serve.py` at the end of a launch script keeps the pid and its /proc entry:
    the table reads a young process again until it settles, and a settled one again in turn,
    so the watch matches the program it became within REFRESH_EVERY turns (here one a scan)."""
    from ctxd.collectors.proc import proctree

    monkeypatch.setattr(proctree, "REFRESH_GAP_S", 0.0)

    tag = f"ctxd-exec-{uuid.uuid4().hex[:12]}"
    script = tmp_path / "launch.sh"
    script.write_text(f'sleep 2.5\nexec {sys.executable} -c "import time; time.sleep(60)" {tag}\n')
    proc = subprocess.Popen(["bash", str(script)])
    try:
        watch_of = watch(match=tag)
        assert processes.collect([watch_of], context()).items == []  # still the script
        wait_until(lambda: tag in Path(f"/proc/{proc.pid}/cmdline").read_text(), "its exec")
        for _ in range(proctree.REFRESH_EVERY + 1):
            rows = processes.collect([watch_of], context()).items
            if rows:
                break
        assert [r.pid for r in rows] == [proc.pid]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_the_executable_is_read_again_after_an_exec(tmp_path: Path) -> None:
    """A `bash -c '… > log &'` that became python3: psutil keeps the executable it first read
    for a handle's whole life, and the dump said "executable `/usr/bin/bash`" under a process
    it named `python3 train.py` (a reader: contradictory)."""
    tag = f"ctxd-exec-{uuid.uuid4().hex[:12]}"
    script, go = tmp_path / "launch.sh", tmp_path / "go"
    then = f'exec {sys.executable} -c "import time; time.sleep(60)" {tag}\n'
    script.write_text(f"while [ ! -e {go} ]; do sleep 0.05; done\n{then}")
    proc = subprocess.Popen(["bash", str(script), tag])
    ctx = context()  # one collector memory for both snapshots, as the service keeps it
    try:
        (before,) = [r for r in processes.collect([watch(match=tag)], ctx).items if r.root]
        assert before.exe is not None and Path(before.exe).name == "bash"
        go.touch()
        wait_until(lambda: "import time" in Path(f"/proc/{proc.pid}/cmdline").read_text(),
                   "its exec")  # fmt: skip
        (after,) = processes.collect([watch(match=tag)], ctx).items
        assert after.pid == proc.pid and after.argv[-1] == tag
        assert after.exe is not None and Path(after.exe).resolve() == Path(sys.executable).resolve()
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_alike_workers_fold_beside_the_one_that_waits_elsewhere() -> None:
    """Seven ranks polling and rank 3 blocked opening its weights: the seven are one row, rank
    3 a row of its own (the group used to fold nothing once one member differed)."""
    from datetime import UTC, datetime

    from ctxd.collectors.proc.procsummary import workers
    from ctxd.models import ProcessInfo

    t0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)

    def row(pid: int, rank: int | None, waiting: str) -> ProcessInfo:
        argv = ["python3", "serve.py"] + (["--tp-rank", str(rank)] if rank is not None else [])
        return ProcessInfo(watch_id=1, pid=pid, ppid=1 if rank is None else 100, name="python3",
                           state="sleeping", started_at=t0, age_s=20, root=rank is None,
                           tree=100, argv=argv, rss_bytes=60 * 2**20, cpu_percent=0.0,
                           waiting=waiting)  # fmt: skip

    ranks = [row(200 + r, r, "wait_for_partner (openat)" if r == 3 else "hrtimer_nanosleep")
             for r in range(8)]  # fmt: skip
    (group,) = workers([row(100, None, "do_wait (wait4)"), *ranks])
    assert group.count == 8 and sorted(group.pids) == [200, 201, 202, 204, 205, 206, 207]
    # no majority alike: nothing folds
    split = [row(300 + r, r, f"w{r % 2}") for r in range(4)]
    assert workers([row(100, None, "x"), *split])[0].pids == []
