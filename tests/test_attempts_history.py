"""Attempts in the dump: a crowd of alike attempts is one line, and every attempt whose
process stopped is seen to end, however many ran."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ctxd.attempts import binding, history
from ctxd.attempts.model import Attempt, AttemptUpdate
from ctxd.models import Observations, ProcessWatch, SessionIn, Watch
from ctxd.settings import Limits
from ctxd.store.database import Store

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    return store


def _launch(pid: int, argv: list[str], at: datetime, **more: object) -> dict:
    return {"start_key": f"{pid}:{at.timestamp()}", "watch_id": 1, "pid": pid, "started_at": at,
            "argv": argv, "cwd": "/srv", "env": {}, "expected_ports": [], **more}  # fmt: skip


def _save(store: Store, *rows: dict) -> None:
    store.save_attempts("s", [AttemptUpdate(**row) for row in rows])


def test_a_crowd_of_alike_launches_is_one_line_and_a_different_one_stays_apart(tmp_path):
    store = _store(tmp_path)
    crowd = [_launch(1000 + i, ["sleep", "3599"], T0 + timedelta(seconds=i)) for i in range(40)]
    server = _launch(2000, ["python", "serve.py", "--tp", "8"], T0 + timedelta(minutes=5))
    _save(store, *crowd, server)
    items = history.history(store, "s", [])
    assert [i.text for i in items] == [
        "`sleep 3599` 40 times (pids 1000, 1001, 1002, … 1039) from 12:00:00 to 12:00:39 UTC",
        "`python serve.py` (pid 2000) at 12:05:00 UTC",
    ]
    assert "relaunched unchanged" not in (items[0].outcome or "")
    assert items[0].command == "sleep 3599" and items[0].status == "running"


def test_older_attempts_fold_by_the_shape_of_their_error_as_now_reads_it(tmp_path):
    """The fold counts errors alike as Now does (`error_shape`): numbers masked, and only from
    the exception on, so the rank each worker's line names does not split one failure."""
    store = _store(tmp_path)
    ended = T0 + timedelta(hours=1)
    errors = ["[worker a] RuntimeError: NCCL error 1", "[worker b] RuntimeError: NCCL error 2"]
    rows = [
        _launch(n, ["python", "serve.py", "--run", str(n)], T0 + timedelta(minutes=n),
                ended_at=ended, error=errors[n % 2] if n < 2 else "RuntimeError: other")
        for n in range(8)
    ]  # fmt: skip
    _save(store, *rows)
    (fold, *shown) = history.history(store, "s", [])
    assert fold.status == "folded" and len(shown) == 6
    # counted as one kind, said as the newest one read, digits and all (never "c#d")
    assert fold.text.startswith(
        "`python serve.py`: 2 died with `[worker b] RuntimeError: NCCL error 2`"
    ), fold.text
    # laid out for the table: the program, one outcome, and every value the flag took, the
    # session's first attempt's (read against the one after it) among them
    assert fold.program() == "python serve.py" and fold.ran == "2 died the same way"
    assert fold.changed == "varied: --run 0, 1", fold.changed


def test_a_folded_flag_of_a_few_words_names_the_attempts_each_value_held_for(tmp_path):
    """Thirty launches that cycle an algorithm every five runs: the fold says which
    attempts ran which (was NVLS tried after the user asked?), the first five with the value
    the first was launched with, though no diff of theirs names it; a number-valued flag
    keeps its range."""
    store = _store(tmp_path)
    algos = ["Ring", "Tree", "NVLS"]
    ended = T0 + timedelta(hours=1)
    rows = [
        _launch(n, ["python", "serve.py", "--run", str(n), "--algo", algos[(n - 1) // 5 % 3]],
                T0 + timedelta(minutes=n), ended_at=ended, error="RuntimeError: NCCL error",
                env={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN" if n < 12 else "INFO",
                     "HF_TOKEN": "[REDACTED]"})
        for n in range(1, 31)
    ]  # fmt: skip
    _save(store, *rows)
    (fold, *shown) = history.history(store, "s", [])
    assert len(shown) == 6 and fold.first == 1 and fold.last == 24
    # the variable none of them changed is said once, for all; the one that changed, by value
    assert fold.changed == (
        "varied: --algo Ring (1\N{EN DASH}5, 16\N{EN DASH}20), Tree (6\N{EN DASH}10,"
        " 21\N{EN DASH}24), NVLS (11\N{EN DASH}15); --run 1\N{HORIZONTAL ELLIPSIS}24 (24 values);"
        " NCCL_DEBUG WARN (1\N{EN DASH}11), INFO (12\N{EN DASH}24);"
        " all with NCCL_SOCKET_IFNAME=eth0"
    ), fold.changed


def test_launches_of_one_program_with_other_flags_do_not_fold(tmp_path):
    store = _store(tmp_path)
    _save(store,
        _launch(1, ["python", "serve.py", "--tp", "8"], T0),
        _launch(2, ["python", "serve.py", "--tp", "4"], T0 + timedelta(seconds=1)),
    )  # fmt: skip
    texts = [i.text for i in history.history(store, "s", [])]
    assert texts == [
        "`python serve.py` (pid 1) at 12:00:00 UTC",
        "`python serve.py` (pid 2) at 12:00:01 UTC",
    ]


def test_every_running_launch_is_seen_to_end_not_only_the_newest_twenty(tmp_path):
    store = _store(tmp_path)
    crowd = [_launch(1000 + i, ["sleep", "3599"], T0 + timedelta(seconds=i)) for i in range(30)]
    _save(store, *crowd)
    watch = Watch(id=1, session="s", created_at=T0, spec=ProcessWatch(match="sleep 3599"))
    files = binding.LogFiles((tmp_path,), Limits())
    seen = Observations()  # none runs
    ended = binding.observed(store, "s", [watch], seen, files, binding.cutoff(store, "s"))
    binding.save(store, "s", ended)
    assert store.running_attempts("s") == []
    ended = store.list_attempts("s", limit=100)
    assert len(ended) == 30 and all(row.ended_at for row in ended)


def test_launches_read_once_are_read_again_after_any_write_here_or_elsewhere(tmp_path):
    """The parsed launches are kept between snapshots, and dropped on a write through this
    store or a commit by another connection (another process on the same database)."""
    store = _store(tmp_path)
    _save(store, _launch(1, ["python", "a.py"], T0))
    first = history.history(store, "s", [])
    assert history.history(store, "s", []) == first
    assert history._recent(store, "s") is history._recent(store, "s")  # kept
    _save(store, _launch(2, ["python", "b.py"], T0 + timedelta(minutes=1)))
    assert [i.text.split("`")[1] for i in history.history(store, "s", [])] == [
        "python a.py",
        "python b.py",
    ]
    other = Store(tmp_path / "ctxd.db")
    try:
        ended = {"start_key": _launch(2, [], T0 + timedelta(minutes=1))["start_key"]}
        other.save_attempts("s", [AttemptUpdate(**ended, ended_at=T0 + timedelta(minutes=2))])
    finally:
        other.close()
    assert history.history(store, "s", [])[-1].status != "running"


def test_a_command_reported_after_a_snapshot_saw_its_process_is_one_attempt(tmp_path):
    """A snapshot can see a launch's process before the harness reports the command: the
    command then joins that launch instead of making a second attempt that 'died unseen'."""
    store = _store(tmp_path)
    argv = ["/usr/bin/python3", "serve.py", "--run", "7"]
    _save(store, _launch(4242, argv, T0))  # seen first, no command
    attempt = Attempt(start_key="cmd:x", argv=("python3", "serve.py", "--run", "7"), cwd="/srv",
                      started_at=T0 + timedelta(seconds=1), command="nohup python3 serve.py …",
                      tool_id="toolu_1", logs=("/srv/run7.log",), expected_ports=(),
                      pid=None)  # fmt: skip
    seen = binding.seen_before(store, "s", attempt)
    assert seen is not None and seen.start_key == f"4242:{T0.timestamp()}"
    other = replace(attempt, argv=("python3", "serve.py", "--run", "8"))
    assert binding.seen_before(store, "s", other) is None  # other flags: a new attempt
    key = seen.start_key
    joined = AttemptUpdate(key, bound_from=key, command=attempt.command, logs=attempt.logs)
    store.save_attempts("s", [joined])
    (row,) = store.list_attempts("s")
    assert row.command == "nohup python3 serve.py …" and list(row.logs) == ["/srv/run7.log"]


def test_a_process_read_as_it_exited_keeps_the_variables_its_line_set(tmp_path):
    """A snapshot saw the launch's process as it exited (/proc gave no environment), then the
    harness reported its line `NCCL_SOCKET_IFNAME=eth0 nohup python3 serve.py …`: the attempt
    keeps the line's variables, so the next attempt's diff does not say they were removed;
    a process bound as it ran keeps its line's too, beside what /proc showed."""
    store = _store(tmp_path)
    argv = ["/usr/bin/python3", "serve.py", "--run", "7"]
    _save(store, _launch(4242, argv, T0))  # seen first, exiting: no environment read
    attempt = Attempt(start_key="cmd:x", argv=("python3", "serve.py", "--run", "7"), cwd="/srv",
                      started_at=T0 + timedelta(seconds=1), command="… nohup python3 serve.py …",
                      tool_id="toolu_1", logs=(), expected_ports=(), pid=None,
                      env={"NCCL_SOCKET_IFNAME": "eth0"})  # fmt: skip
    store.save_attempts("s", [binding.joining(store, "s", attempt)])
    (row,) = store.list_attempts("s")
    assert row.env == {"NCCL_SOCKET_IFNAME": "eth0"}
    # bound as it ran: /proc's values (as they ran) beside the line's
    bound = binding._bound(
        replace(attempt, env={"NCCL_SOCKET_IFNAME": "$NIC", "NCCL_DEBUG": "INFO"}),
        AttemptUpdate(
            "4243:x",
            started_at=T0,
            logs=(),
            env={"NCCL_SOCKET_IFNAME": "eth0", "CUDA_VISIBLE_DEVICES": "0"},
        ),
    )
    assert bound.env == {
        "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0"
    }  # fmt: skip


def test_an_attempt_whose_process_is_a_zombie_has_ended_with_its_logs_error(tmp_path):
    """A root whose parent has not reaped it yet still shows in the process table: it exited,
    so its attempt ends with its log's error, and the dump keeps the argv it ran with."""
    from ctxd.models.processes import ProcessInfo, process_key

    store = _store(tmp_path)
    log = tmp_path / "run7.log"
    log.write_text("loading\nRuntimeError: NCCL error in run 7 (code 57)\n")
    at = datetime.now(UTC) - timedelta(seconds=5)
    argv = ["python", "serve.py", "--run", "7"]
    key = process_key(4242, at)
    _save(store, {**_launch(4242, argv, at), "start_key": key, "logs": [str(log)]})
    zombie = ProcessInfo(watch_id=1, pid=4242, ppid=1, name="python", state="zombie",
                         started_at=at, age_s=5, argv=[], root=True, tree=4242)  # fmt: skip
    seen = Observations.model_validate({"processes": {"items": [zombie.model_dump()]}})
    watch = Watch(id=1, session="s", created_at=T0, spec=ProcessWatch(match="serve.py"))
    files = binding.LogFiles((tmp_path,), Limits())
    rows = binding.observed(store, "s", [watch], seen, files, binding.cutoff(store, "s"))
    (item,) = history.history(store, "s", [], rows)
    assert item.status == "ended" and item.text.startswith("`python serve.py` (pid 4242)")
    assert item.error == "RuntimeError: NCCL error in run 7 (code 57)"


def test_a_process_seen_exiting_with_no_command_line_is_no_attempt(tmp_path):
    """Caught between its exit and its zombie state, a launch's process reads an empty command
    line: it tells no attempt, so it neither makes one nor keeps its own running."""
    from ctxd.models.processes import ProcessInfo

    store = _store(tmp_path)
    at = datetime.now(UTC) - timedelta(seconds=5)
    exiting = ProcessInfo(watch_id=1, pid=4343, ppid=1, name="python", state="running",
                          started_at=at, age_s=5, argv=[], root=True, tree=4343)  # fmt: skip
    seen = Observations.model_validate({"processes": {"items": [exiting.model_dump()]}})
    watch = Watch(id=1, session="s", created_at=T0, spec=ProcessWatch(match="serve.py"))
    files = binding.LogFiles((tmp_path,), Limits())
    cut = binding.cutoff(store, "s")
    assert binding.observed(store, "s", [watch], seen, files, cut) == []


def test_the_shell_of_a_command_is_no_attempt_unless_it_stays_or_was_the_launch(tmp_path):
    """`bash -c 'nohup python serve.py … &'` (the shell a harness runs a command in) matches the
    watch for a moment: it is no launch of its own while younger than a launch takes to start;
    one that stays is an attempt, and a `bash -c …` the agent launched binds its command."""
    from ctxd.models.processes import ProcessInfo

    store = _store(tmp_path)
    at = datetime.now(UTC)
    line = "nohup python serve.py --run 1 > run1.log 2>&1 &"

    def shell(pid: int, age: float) -> dict:
        return ProcessInfo(watch_id=1, pid=pid, ppid=1, name="bash", state="sleeping",
                           started_at=at - timedelta(seconds=age), age_s=age,
                           argv=["bash", "-c", line], root=True, tree=pid,
                           cwd="/srv").model_dump()  # fmt: skip

    watch = Watch(id=1, session="s", created_at=T0, spec=ProcessWatch(match="serve\\.py"))
    files = binding.LogFiles((tmp_path,), Limits())

    def rows(*shells: dict) -> list[AttemptUpdate]:
        seen = Observations.model_validate({"processes": {"items": list(shells)}})
        cut = binding.cutoff(store, "s")
        return binding.observed(store, "s", [watch], seen, files, cut)

    assert rows(shell(100, 0.3)) == []  # passing through
    nohup = {**shell(99, 0.1), "argv": ["nohup", "python", "serve.py", "--run", "1"]}
    assert rows(nohup) == []  # about to become python
    assert [row.pid for row in rows(shell(101, 5.0))] == [101]  # it stays: an attempt
    launched = {"start_key": "cmd:b", "argv": ["bash", "-c", line], "cwd": "/srv",
                "started_at": at, "command": f"nohup bash -c '{line}' &", "logs": [],
                "expected_ports": [], "seen": 0, "pid": None}  # fmt: skip
    _save(store, launched)
    (bound,) = rows(shell(102, 0.3))
    assert bound.bound_from == "cmd:b" and bound.pid == 102


def test_an_attempt_that_writes_to_another_log_says_so_among_its_changes(tmp_path):
    store = _store(tmp_path)
    argv = ["python3", "serve.py", "--port", "30000"]
    _save(store,
          _launch(1, argv, T0, logs=["/srv/logs/attempt1.log"], ended_at=T0),
          _launch(2, argv, T0 + timedelta(seconds=5), logs=["/srv/server.log"]),
          _launch(3, [*argv, "--tp", "8"], T0 + timedelta(seconds=9),
                  logs=["/srv/a3.log"]))  # fmt: skip
    second, third = history.history(store, "s", [])[1:]
    assert (
        second.changed == "relaunched with output logs/attempt1.log \N{RIGHTWARDS ARROW} server.log"
    )
    assert (
        third.changed
        == "relaunched with --tp 8 added; output server.log \N{RIGHTWARDS ARROW} a3.log"
    )


def test_the_program_a_passing_shell_started_binds_its_attempt_while_the_shell_lives(tmp_path):
    """`bash -c 'nohup python serve.py … &'` seen in the instant before the shell goes: its
    child is the launch, and binds the attempt its command made, so a run that dies before the
    next look is one ctxd saw, not one that "died within 1 s, its process gone before ctxd first
    scanned for it"."""
    from ctxd.models.processes import ProcessInfo

    store = _store(tmp_path)
    at = datetime.now(UTC) - timedelta(seconds=0.3)
    argv = ["python", "serve.py", "--run", "199"]
    line = "nohup python serve.py --run 199 > run199.log 2>&1 &"
    pending = {**_launch(0, argv, at), "start_key": "cmd:199", "pid": None, "seen": False,
               "watch_id": None, "command": line}  # fmt: skip
    _save(store, pending)
    shell = ProcessInfo(watch_id=1, pid=7224, ppid=1, name="bash", state="sleeping",
                        started_at=at, age_s=0.3, argv=["bash", "-c", line], root=True,
                        tree=7224, cwd="/srv")  # fmt: skip
    child = ProcessInfo(watch_id=1, pid=7226, ppid=7224, name="python", state="running",
                        started_at=at, age_s=0.3, argv=argv, root=False, tree=7224,
                        cwd="/srv")  # fmt: skip
    watch = Watch(id=1, session="s", created_at=T0, spec=ProcessWatch(match="serve.py"))
    files = binding.LogFiles((tmp_path,), Limits())

    def look(*items: ProcessInfo) -> list[AttemptUpdate]:
        seen = Observations.model_validate(
            {"processes": {"items": [p.model_dump() for p in items]}}
        )
        return binding.observed(store, "s", [watch], seen, files, binding.cutoff(store, "s"))

    (update,) = look(shell, child)
    assert update.bound_from == "cmd:199" and update.pid == 7226 and update.seen is True
    stranger = child.model_copy(update={"argv": ["python", "other.py"], "pid": 7300})
    assert look(shell, stranger) == []  # a child no command names waits to be a root


def test_a_shim_that_becomes_the_program_binds_the_attempt_of_its_command(tmp_path):
    """pyenv's `python3` is a bash script that execs the interpreter in the same pid: seen
    as that script an instant after the launch, it is not a launch of its own; seen as the
    program, it binds the attempt its command made (one attempt, not two)."""
    from ctxd.models.processes import ProcessInfo

    store = _store(tmp_path)
    at = datetime.now(UTC) - timedelta(seconds=0.3)
    argv = ["python3", "up.py", "--port", "8000"]
    line = "nohup python3 up.py --port 8000 > up.log 2>&1 &"
    pending = {**_launch(0, argv, at), "start_key": "cmd:up", "pid": None, "seen": False,
               "watch_id": None, "command": line}  # fmt: skip
    _save(store, pending)
    shim = ProcessInfo(watch_id=1, pid=7300, ppid=1, name="bash", state="sleeping",
                       started_at=at, age_s=0.3, root=True, tree=7300, cwd="/srv",
                       argv=["bash", "/root/.pyenv/libexec/pyenv-exec", *argv])  # fmt: skip
    watch = Watch(id=1, session="s", created_at=T0, spec=ProcessWatch(match="up.py"))
    files = binding.LogFiles((tmp_path,), Limits())

    def look(*items: ProcessInfo) -> list[AttemptUpdate]:
        seen = Observations.model_validate(
            {"processes": {"items": [p.model_dump() for p in items]}}
        )
        return binding.observed(store, "s", [watch], seen, files, binding.cutoff(store, "s"))

    assert look(shim) == []  # the shim: not yet the program, nor a launch of its own
    program = shim.model_copy(update={"argv": ["/root/.pyenv/versions/3.11/bin/python3",
                                               *argv[1:]], "name": "python3"})  # fmt: skip
    (update,) = look(program)
    assert update.bound_from == "cmd:up" and update.pid == 7300, update


def test_a_log_per_run_is_no_change_of_output(tmp_path):
    store = _store(tmp_path)
    _save(store,
          _launch(1, ["python3", "serve.py", "--run", "1"], T0, logs=["/srv/logs/run1.log"],
                  ended_at=T0),
          _launch(2, ["python3", "serve.py", "--run", "2"], T0 + timedelta(seconds=5),
                  logs=["/srv/logs/run2.log"]))  # fmt: skip
    second = history.history(store, "s", [])[1]
    assert second.changed == "relaunched with --run 1 \N{RIGHTWARDS ARROW} 2", second.changed


def test_the_kept_fold_is_the_fold_made_anew_after_launches_an_ending_and_a_restart(tmp_path):
    """A long session's continue folds its older attempts once, not at every snapshot: the fold
    is kept with the read it was made from. Whatever changed since (more launches, an attempt
    that ended, a write by another connection), it is the fold a fresh store makes."""
    store = _store(tmp_path)

    def launches(first: int, count: int) -> list[dict]:
        return [
            _launch(n, ["python", "serve.py", "--run", str(n), "--algo", f"v{n % 3}"],
                    T0 + timedelta(seconds=n), ended_at=T0 + timedelta(seconds=n, milliseconds=500),
                    error=f"RuntimeError: NCCL error in run {n} (code {n % 5})", seen=n % 2 == 0,
                    logs=[f"/srv/logs/run{n}.log"])
            for n in range(first, first + count)
        ]  # fmt: skip

    def anew() -> list:
        fresh = Store(tmp_path / "ctxd.db")  # a restart: nothing kept
        try:
            assert history.attempt_logs(fresh, "s") == history.attempt_logs(store, "s")
            return history.history(fresh, "s", [])
        finally:
            fresh.close()

    _save(store, *launches(1, 40))
    first = history.history(store, "s", [])
    assert first == anew()
    assert first[0].status == "folded" and first[0].label == "attempts 1\N{EN DASH}34", first[0]
    stored, total = history._recent(store, "s")
    kept = history._kept_fold(store, "s", stored, total)
    assert history._kept_fold(store, "s", *history._recent(store, "s")) is kept  # not made again
    assert history.history(store, "s", []) == first

    _save(store, *launches(41, 25))  # more launches: the older ones are folded again
    more = history.history(store, "s", [])
    assert more == anew() and more != first
    assert more[0].label == "attempts 1\N{EN DASH}59" and more[-1].label == "attempt 65"

    live = _launch(66, ["python", "serve.py", "--run", "66"], T0 + timedelta(seconds=66),
                   logs=["/srv/logs/run65.log"])  # it writes where run 65 wrote  # fmt: skip
    _save(store, {**live, "pid": None, "seen": False})  # a command, its process not seen yet
    assert history.history(store, "s", []) == anew()
    every, ended_logs = history.attempt_logs(store, "s")
    assert "/srv/logs/run65.log" in every and "/srv/logs/run65.log" not in ended_logs
    ends = {"start_key": live["start_key"], "ended_at": T0 + timedelta(seconds=67),
            "error": "RuntimeError: NCCL error in run 66 (code 1)"}  # fmt: skip
    other = Store(tmp_path / "ctxd.db")  # it dies, as another connection writes it
    try:
        other.save_attempts("s", [AttemptUpdate(**ends)])
    finally:
        other.close()
    ended = history.history(store, "s", [])
    assert ended == anew() and ended[-1].error == ends["error"]
    assert "/srv/logs/run65.log" in history.attempt_logs(store, "s")[1]  # no run writes it now
    assert history.history(store, "s", []) == ended
