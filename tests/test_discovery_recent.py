"""Recent commands: latest runs with exit status, first error line of a failure, repeats folded."""

from datetime import UTC, datetime, timedelta

from ctxd.discovery.actions import CommandAction
from ctxd.discovery.recent import first_error_line, last_reads, recent_commands
from ctxd.models.journal import LastRead


def last_read(actions: list[CommandAction]) -> LastRead | None:
    """The newest look alone."""
    reads = last_reads(actions, 1)
    return reads[0] if reads else None


T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TRACEBACK = """Loading weights: 100%|██████████| 64/64
Traceback (most recent call last):
  File "x.py", line 3, in <module>
    main()
RuntimeError: CUDA error: no kernel image is available for execution on the device
"""


def cmd(text: str, minute: int, exit_status: int | None = 0, output: str = "", bg: bool = False):
    return CommandAction(
        command=text,
        at=T0 + timedelta(minutes=minute),
        exit_status=exit_status,
        output_tail=output,
        background=bg,
    )


def test_repeats_fold_at_their_latest_run_and_failures_keep_their_error() -> None:
    history = [
        cmd("tail -n 50 server.log", 1),
        cmd("nvidia-smi", 2),
        cmd("make -j8", 3, 2, "cc -c a.c\nmake: *** [a.o] Error 1\nmore"),
        cmd("tail  -n 50 server.log", 4),
        cmd("nohup python -m sglang.launch_server > s.log 2>&1 &", 5, None, bg=True),
    ]
    recent = recent_commands(history)
    assert [r.command.split()[0] for r in recent] == ["nvidia-smi", "make", "tail", "nohup"]
    tail = recent[2]
    assert tail.runs == 2 and tail.at == T0 + timedelta(minutes=4)
    assert recent[1].line() == "12:03:00 `make -j8` → exit 2: make: *** [a.o] Error 1"
    assert recent[2].line() == "12:04:00 `tail -n 50 server.log` → exit 0 (2 runs)"
    assert recent[3].line().endswith("→ sent to the background")


def test_limit_keeps_the_latest() -> None:
    words = [f"echo {chr(ord('a') + i)}" for i in range(26)]
    recent = recent_commands([cmd(w, i) for i, w in enumerate(words)], limit=10)
    assert [r.command for r in recent] == words[16:]


def test_a_poll_alike_but_for_its_numbers_is_one_line_and_a_launch_its_own() -> None:
    launch = "nohup python3 serve.py --port 8001 > s1.log 2>&1 &"
    history = [cmd(launch, 0, bg=True), *(cmd(f"tail -n {n} s1.log", n) for n in range(1, 9))]
    history += [cmd("nvidia-smi", 10), cmd("tail -n 3 s1.log", 11)]
    recent = recent_commands(history, attempts={launch: ("attempt 4 (pid 4242)", history[0].at)})
    assert [r.command for r in recent] == [launch, "tail -n 8 s1.log", "nvidia-smi",
                                           "tail -n 3 s1.log"]  # fmt: skip
    assert recent[0].line().endswith("→ started in the background → attempt 4 (pid 4242)")
    assert (
        recent[1]
        .line()
        .endswith("(run 8 times in a row, alike but for their numbers; the last shown)")
    )


def test_first_error_line() -> None:
    assert first_error_line(TRACEBACK) == (
        "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    )
    assert first_error_line("ok\nbash: foo: command not found\n") == "bash: foo: command not found"
    assert first_error_line("all good\n") is None
    assert first_error_line("") is None
    assert len(first_error_line("error " + "x" * 5000) or "") == 200


def test_a_successful_command_has_no_error_line() -> None:
    (only,) = recent_commands([cmd("grep -c error log", 0, 0, "error: 3 matches")])
    assert only.first_error is None


def test_a_launch_is_named_by_its_start_since_its_attempt_holds_the_line():
    from datetime import UTC, datetime

    from ctxd.discovery.recent import LAUNCH_CHARS, RecentCommand

    line = "NCCL_DEBUG=INFO nohup python serve.py " + "--flag value " * 11 + "> run.log 2>&1 &"
    launch = RecentCommand(line, datetime.now(UTC), 0, True, attempt="attempt 7 (pid 42)")
    said = launch.line()
    assert said.endswith("…` → started in the background → attempt 7 (pid 42)"), said
    assert len(said.split("`")[1]) == LAUNCH_CHARS
    plain = RecentCommand(line, datetime.now(UTC), 0).line()
    assert "> run.log 2>&1 &` → exit 0" in plain  # any other command keeps its whole line


def test_a_launch_line_is_dated_when_its_attempt_was_launched():
    """The harness reports a command when its call returns (a second after the launch): the
    line that made an attempt says the attempt's launch time, as the attempts table does."""
    launch = "nohup python3 serve.py > s.log 2>&1 &"
    history = [cmd(launch, 1, bg=True), cmd("tail -2 s.log", 2)]
    started = history[0].at - timedelta(seconds=1)
    recent = recent_commands(history, attempts={launch: ("attempt 1", started)})
    assert recent[0].at == started and recent[0].line().startswith(f"{started:%H:%M:%S} `")
    assert recent[1].at == history[1].at  # any other command: when the harness reported it


def test_the_newest_look_at_a_file_keeps_what_it_showed() -> None:
    """The agent's newest read of code (grep, sed -n, cat, piped to nl) is kept with its last
    lines: a reader of the dump sees what the agent saw. A log's tail (the Logs section's), a
    failed read, a launch, a command that also runs something else, or an empty output is
    no read."""
    code = "\n".join(f"{n}:    line {n}" for n in range(1, 31))
    history = [
        cmd(
            'grep -n -A12 "def stage_weights" launch_server.py', 1, output="40:def stage_weights\n"
        ),
        cmd("sed -n 1,30p train.py | nl", 2, output=code),
        cmd("tail -3 server.log", 3, output="Waiting for all TP ranks\n"),  # a log
        cmd("cat logs/run7.txt", 4, output="x\n"),  # in a logs folder
        cmd("grep -n cache missing.py", 5, 2, output="grep: missing.py: No such file"),
        cmd("cat a.py && python3 a.py", 6, output="ran\n"),  # runs something too
        cmd("head -5 empty.py", 7, output="\n"),
        cmd("nohup python3 serve.py > s.log 2>&1 &", 8, None, bg=True),
    ]
    read = last_read(history)
    assert read is not None and read.command == "sed -n 1,30p train.py | nl"
    assert read.lines == [f"{n}:    line {n}" for n in range(17, 31)] and read.above == 16
    assert read.at == T0 + timedelta(minutes=2)
    assert last_read(history[2:]) is None
    # a long line's output keeps what fits, from the end
    wide = "\n".join("y" * 400 for _ in range(10))
    wide_read = last_read([cmd("cat wide.py", 1, output=wide)])
    assert wide_read is not None and len(wide_read.lines) == 3 and wide_read.above == 7


def test_a_look_whose_exit_the_harness_never_told_counts_unless_it_complained() -> None:
    """Codex tells no exit status: a read with output counts, unless a line is the reader's
    own complaint."""
    fine = cmd("grep -n cache train.py", 1, None, output="12:    cache = {}\n")
    missing = cmd(
        "grep -n cache gone.py", 2, None, output="grep: gone.py: No such file or directory\n"
    )
    assert last_read([fine]) is not None and last_read([fine, missing]).command == fine.command


def test_a_page_asked_of_a_server_is_a_look_and_a_request_that_sends_is_not() -> None:
    """`sleep 2; curl -s 127.0.0.1:8000/` shows the agent what its server answered: kept. A
    POST, a form, a download to a file, or `sleep` alone is no look."""
    page = cmd("sleep 2; curl -s 127.0.0.1:8000/", 1, output="ok\n")
    read = last_read([page])
    assert read is not None and read.lines == ["ok"] and read.command == page.command
    for other in (
        "curl -s -X POST 127.0.0.1:8000/reload",
        "curl -s -d '{}' 127.0.0.1:8000/v1/completions",
        "curl -s --data-binary @q.json 127.0.0.1:8000/",
        "curl -sO https://example.com/model.bin",
        "sleep 5",
        "curl -s 127.0.0.1:8000/ && python3 check.py",
    ):
        assert last_read([page, cmd(other, 2, output="done\n")]) == read, other


def test_the_two_newest_looks_are_kept_oldest_first_each_line_once() -> None:
    """The config the agent read, then what its server answered: both, oldest first; a look
    run again counts once, at its newest run."""
    config = cmd("grep -n workers config.ini", 1, output="3:workers = 0\n")
    page = cmd("sleep 2; curl -s 127.0.0.1:8000/", 2, output="ok\n")
    again = cmd("grep -n workers config.ini", 3, output="3:workers = 2\n")
    assert [r.command for r in last_reads([config, page])] == [config.command, page.command]
    (before, newest) = last_reads([config, page, again])
    assert before.command == page.command and newest.lines == ["3:workers = 2"]
    assert last_reads([]) == []
