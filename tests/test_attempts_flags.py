"""Attempt outcomes and what changed in the flags from one attempt to the next, on the seed
story's three attempts."""

from datetime import UTC, datetime, timedelta

from ctxd.attempts.flags import (
    attempt_diff,
    flag_diff,
    parse_flags,
    summary_line,
)
from ctxd.attempts.model import Attempt

BASE = "python -m sglang.launch_server --model-path /models/Kimi-K2.5-INT4 --tp 8 --port 8000"
EAGLE = (
    BASE + " --speculative-algorithm EAGLE3 --speculative-draft-model-path /models/AQ-MedAI-drafter"
).split()
PLAIN = BASE.split()
DEBUG = (BASE + " --disable-cuda-graph --log-level debug").split()
T0 = datetime(2026, 11, 30, 12, 1, tzinfo=UTC)


def test_eagle_to_base_model_removes_the_drafter() -> None:
    diff = flag_diff(EAGLE, PLAIN)
    assert diff.added == [] and diff.changed == []
    assert diff.removed == [
        "--speculative-algorithm EAGLE3",
        "--speculative-draft-model-path /models/AQ-MedAI-drafter",
    ]
    assert summary_line(diff).startswith("relaunched with --speculative-algorithm EAGLE3, ")


def test_debug_relaunch_adds_the_debug_flags() -> None:
    diff = flag_diff(PLAIN, DEBUG)
    assert diff.added == ["--disable-cuda-graph", "--log-level debug"]
    assert summary_line(diff) == "relaunched with --disable-cuda-graph, --log-level debug added"


def test_changed_values_glued_values_positional_and_env() -> None:
    before = ["./serve", "model-a.bin", "--port=8000", "--verbose"]
    after = ["/opt/bin/serve", "model-b.bin", "--port", "30000", "--verbose"]
    diff = flag_diff(before, after, {"NCCL_DEBUG": "WARN", "HF_HOME": "/h"}, {"NCCL_DEBUG": "INFO"})
    assert diff.changed == ["--port 8000 → 30000"]
    assert diff.positional == ["model-a.bin → model-b.bin"]
    assert diff.env == ["HF_HOME removed", "NCCL_DEBUG WARN → INFO"]
    line = summary_line(diff)
    assert "--port 8000 → 30000" in line and "env HF_HOME removed" in line


def test_unchanged_and_different_program() -> None:
    assert summary_line(flag_diff(PLAIN, list(PLAIN))) == "relaunched unchanged"
    other = flag_diff(PLAIN, ["python", "-m", "vllm.entrypoints.api_server", "--port", "8000"])
    assert other.program_changed
    assert summary_line(other, "vllm") == "a different program: `vllm`"
    assert summary_line(other, "vllm", "python serve.py") == (
        "a different program: `vllm` (the one before ran `python serve.py`)"
    )


def test_parse_flags_handles_repeats_negative_numbers_and_bare_flags() -> None:
    flags, positional = parse_flags(["--a", "1", "--a", "2", "--lr", "-0.5", "-v", "x", "--b="])
    assert flags == {"--a": "1 2", "--lr": "-0.5", "-v": "x", "--b": ""}
    assert positional == []
    assert parse_flags([]) == ({}, [])
    # Without the program's option table a bare flag takes a following word as its value;
    # `--` ends the flags.
    assert parse_flags(["--verbose", "m.bin"]) == ({"--verbose": "m.bin"}, [])
    assert parse_flags(["--verbose", "--", "m.bin"]) == ({"--verbose": None}, ["m.bin"])


def test_outcomes() -> None:
    running = Attempt(pid=50299, argv=tuple(DEBUG), started_at=T0)
    assert running.outcome(T0 + timedelta(minutes=3)) == "running for 3 min"
    gone = Attempt(pid=1, argv=(), started_at=T0, ended_at=T0 + timedelta(minutes=2, seconds=5))
    assert gone.outcome(T0) == (
        "ended after 2 min (its exit status goes to its parent, not to ctxd)"
    )
    crashed = Attempt(1, (), T0, ended_at=T0 + timedelta(seconds=2), error="RuntimeError: x")
    assert crashed.outcome(T0) == "died after 2 s"  # its error says why, beside it
    failed = Attempt(1, (), T0, ended_at=T0 + timedelta(seconds=40), exit_status=1)
    assert failed.outcome(T0) == "exited with status 1 after 40 s"
    killed = Attempt(1, (), T0, ended_at=T0 + timedelta(hours=1, minutes=5), exit_status=-9)
    assert killed.outcome(T0) == "killed by signal 9 after 1 h 5 min"


def test_the_shells_own_variables_are_not_added_when_the_attempt_before_was_never_seen():
    """Attempt 1 died before ctxd saw it (its environment is what its line set: nothing);
    attempt 2 was seen, and /proc gives what the harness's shell passed to every launch too
    (PYTHONPATH). Only what attempt 2's line sets is "added"."""
    at = datetime(2026, 12, 3, tzinfo=UTC)
    first = Attempt(
        pid=None,
        argv=("python3", "serve.py", "--mem", "0.95"),
        started_at=at,
        command="nohup python3 serve.py --mem 0.95 > a.log 2>&1 &",
        seen=False,
    )
    second = Attempt(
        pid=7,
        argv=("python3", "serve.py", "--mem", "0.85"),
        started_at=at,
        env={"HF_TOKEN": "[REDACTED]", "PYTHONPATH": "service"},
        command="HF_TOKEN=[REDACTED] nohup python3 serve.py --mem 0.85 > b.log &",
    )
    assert attempt_diff(first, second).env == ["HF_TOKEN=[REDACTED] added"]
    # both seen: /proc on either side, every difference counts
    seen_first = Attempt(pid=6, argv=first.argv, started_at=at, env={"PYTHONPATH": "old"},
                         command=first.command)  # fmt: skip
    assert attempt_diff(seen_first, second).env == [
        "HF_TOKEN=[REDACTED] added",
        "PYTHONPATH old → service",
    ]


def test_a_value_the_line_reads_from_elsewhere_is_no_change_from_the_value_seen():
    """Attempt 1 died unseen, its line read the token from a file (`$(cat …)`, the shell's
    words); attempt 2's is read from /proc (redacted): the same token, not "changed"."""
    at = datetime(2026, 12, 3, tzinfo=UTC)
    line = "DATASTORE_TOKEN=$(cat .token) nohup python3 train.py --batch-size {} > t.log &"
    first = Attempt(pid=None, argv=("python3", "train.py", "--batch-size", "256"),
                    started_at=at, env={"DATASTORE_TOKEN": "$(cat .token)"},
                    command=line.format(256), seen=False)  # fmt: skip
    second = Attempt(pid=7, argv=("python3", "train.py", "--batch-size", "64"), started_at=at,
                     env={"DATASTORE_TOKEN": "[REDACTED]"}, command=line.format(64))  # fmt: skip
    diff = attempt_diff(first, second)
    assert diff.env == [] and diff.changed == ["--batch-size 256 → 64"], diff
    # in either order, and a name one side lacks is still added or removed
    assert attempt_diff(second, first).env == []
    third = Attempt(pid=None, argv=first.argv, started_at=at, env={**first.env, "X": "$(cat x)"},
                    command="X=$(cat x) " + line.format(256), seen=False)  # fmt: skip
    assert attempt_diff(second, third).env == ["X=$(cat x) added"]


def test_an_attempt_is_named_as_a_person_would_type_its_program():
    from ctxd.attempts.flags import program_name

    assert program_name(["python3", "-m", "http.server", "18555"]) == "python3 -m http.server 18555"
    assert program_name(["/usr/bin/python3", "-m", "http.server", "--bind", "::"]) == (
        "python3 -m http.server"
    )
    assert program_name(["vllm", "serve", "meta-llama/Llama-3.1-8B"]) == "vllm serve"
    assert program_name(["python3", "serve.py", "config.yaml"]) == "python3 serve.py"
