"""Plain words: the dump's own bookkeeping in its footer, watches named by what they watch,
durations read against the life of what they measure (the real renderer and signals)."""

from datetime import UTC, datetime, timedelta

from ctxd.models import (
    LogInfo,
    LogsSection,
    Observations,
    PortInfo,
    PortsSection,
    ProcessesSection,
    ProcessInfo,
    Snapshot,
    SnapshotHeader,
)
from ctxd.render.dump_files import DumpLocation
from ctxd.render.markdown import render_dump
from ctxd.signals import derive as signals
from ctxd.signals import logs as signal_logs

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def dump(observations: Observations | None = None, previous: bool = True) -> str:
    where = DumpLocation("/srv/ctxd/s/v0002.md", "http://h/api/s/2", "http://h/api/s/resume")
    header = SnapshotHeader(
        session="s", version=2, taken_at=T0, trigger="continue", host="gpu-7", duration_ms=35,
        previous_version=1 if previous else None,
        previous_taken_at=T0 - timedelta(seconds=5) if previous else None,
    )  # fmt: skip
    snapshot = Snapshot(header=header, observations=observations or Observations())
    return render_dump(snapshot, where)


def test_the_dumps_own_timing_and_host_are_in_its_footer() -> None:
    text = dump()
    top, footer = text.split("## Handover")[0], text.split("## Where this dump lives")[1]
    assert "took" not in top and "Previous" not in top and "gpu-7" not in top
    assert footer.startswith(
        "\n\n- This is v2, taken on host `gpu-7` in 35 ms; v1 came 5 s earlier\n"
        "- Markdown: `/srv/ctxd/s/v0002.md`\n"
    )
    first = dump(previous=False).split("## Where this dump lives")[1]
    assert "- This is v2, the first of this session, taken on host `gpu-7` in 35 ms\n- " in first


def test_the_footer_says_how_long_the_file_stays_and_where_the_version_always_is() -> None:
    header = SnapshotHeader(session="s", version=2, taken_at=T0, trigger="manual", host="h")
    snapshot = Snapshot(header=header)
    where = DumpLocation("/srv/ctxd/s/v0002.md", "http://h/api/s/2", "http://h/api/s/resume", 20)
    assert (
        "- Markdown: `/srv/ctxd/s/v0002.md` while it is among the session's newest 20 versions;"
        " always at http://h/api/s/2/markdown\n"
    ) in render_dump(snapshot, where)


def test_a_port_is_expected_by_a_named_process_not_a_watch_number() -> None:
    root = ProcessInfo(watch_id=1, pid=4242, ppid=1, name="sglang", state="sleeping",
                       started_at=T0, age_s=60, root=True)  # fmt: skip
    ports = [PortInfo(host="127.0.0.1", port=30000, listening=False, expected_by=1),
             PortInfo(host="127.0.0.1", port=8000, listening=False, expected_by=3)]  # fmt: skip
    text = dump(Observations(processes=ProcessesSection(items=[root]),
                             ports=PortsSection(items=ports)))  # fmt: skip
    table = text.split("## Ports and health")[1].split("\n## ")[0]
    assert "| 127.0.0.1:30000 | **no** |  | the watched sglang (pid 4242) |" in table
    assert "| 127.0.0.1:8000 | **no** |  | a process watch with nothing running |" in table
    assert "watch 1" not in table and "watch 3" not in table
    # a server on every interface is shown where it listens, not where the watch looked
    ports[0] = PortInfo(host="127.0.0.1", port=30000, listening=True, bound="0.0.0.0")
    served = dump(Observations(ports=PortsSection(items=ports[:1])))
    assert "| 0.0.0.0:30000 | yes |" in served.split("## Ports and health")[1], served
    (gone,) = [s for s in signals.expected_ports(Observations(ports=PortsSection(items=ports)))
               if "8000" in s.subject]  # fmt: skip
    assert gone.text.endswith("; the process watch that expects it matches no running process")


def test_a_silent_log_is_read_against_the_life_of_its_writer() -> None:
    def log(modified_after_start_s: float) -> LogInfo:
        return LogInfo(watch_id=1, path="/srv/run/server.log", size=10, silent_for_s=300,
                       modified_at=T0 + timedelta(seconds=modified_after_start_s),
                       writer_pid=77, writer_started_at=T0)  # fmt: skip

    (wrote,) = signal_logs.silent_logs(Observations(logs=LogsSection(items=[log(120)])))
    assert wrote.text == (
        "log /srv/run/server.log silent for 5 min of the 7 min its writer (pid 77) has run"
    )
    (never,) = signal_logs.silent_logs(Observations(logs=LogsSection(items=[log(-30)])))
    assert never.text == (
        "log /srv/run/server.log silent for 5 min, nothing since its writer (pid 77) "
        "started 4 min ago"
    )
