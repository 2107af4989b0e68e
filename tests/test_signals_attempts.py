"""`signals/attempts.restate`: each Now line says which attempt it is about, and only when
it is about that attempt alone."""

from datetime import UTC, datetime

from ctxd.models import HistoryItem, Observations, Signal
from ctxd.models.processes import ProcessesSection, ProcessInfo
from ctxd.signals.attempts import restate

NOW = datetime(2026, 12, 2, tzinfo=UTC)
IDLE = Signal(severity="warning", code="all_idle", subject="processes",
              text="all 3 watched processes alive at <1% CPU")  # fmt: skip


def attempt(number: int, pid: int | None, status: str) -> HistoryItem:
    return HistoryItem(at=NOW, source="launch", text="python3 serve.py", status=status,
                       label=f"attempt {number}", first=number, last=number, pid=pid)  # fmt: skip


def seen(*family: tuple[int, int]) -> Observations:
    rows = [
        ProcessInfo(
            watch_id=1, pid=pid, ppid=ppid, name="python3", state="S", started_at=NOW, age_s=5.0
        )
        for pid, ppid in family
    ]
    return Observations(processes=ProcessesSection(items=rows))


def idle_line(history: list[HistoryItem], observed: Observations) -> str:
    said = restate([IDLE], history, observed, set())
    return next(s.text for s in said if s.code == "all_idle")


def test_idle_processes_that_are_all_the_running_attempts_tree_are_said_of_it():
    history = [attempt(1, None, "ended"), attempt(2, 100, "running")]
    # the workers come before their parent: the tree is still found whole
    assert idle_line(history, seen((102, 101), (101, 100), (100, 1))).startswith("attempt 2: ")


def test_idle_processes_not_all_of_the_attempt_stay_unattributed():
    history = [attempt(2, 100, "running")]
    other = seen((100, 1), (101, 100), (555, 1))  # 555: a process the agent watched by hand
    assert idle_line(history, other) == IDLE.text
