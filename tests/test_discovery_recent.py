"""Recent commands: latest runs with exit status, first error line of a failure, repeats folded."""

from datetime import UTC, datetime, timedelta

from ctxd.discovery.actions import CommandAction
from ctxd.discovery.recent import first_error_line, recent_commands

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
    assert recent[1].line() == "12:03 `make -j8` → exit 2: make: *** [a.o] Error 1"
    assert recent[2].line() == "12:04 `tail -n 50 server.log` → exit 0 (2 runs)"
    assert recent[3].line().endswith("→ sent to the background")


def test_limit_keeps_the_latest() -> None:
    history = [cmd(f"echo {i}", i) for i in range(30)]
    recent = recent_commands(history, limit=10)
    assert [r.command for r in recent] == [f"echo {i}" for i in range(20, 30)]


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
