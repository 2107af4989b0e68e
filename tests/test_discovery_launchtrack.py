"""Launches followed over collects: the seed story's three SGLang attempts, replayed."""

from datetime import UTC, datetime, timedelta

from service.discovery.launchtrack import Seen, changes, observe

BASE = ("python", "-m", "sglang.launch_server", "--model-path", "/models/kimi", "--port", "8000")
EAGLE = (*BASE, "--speculative-algorithm", "EAGLE3")
DEBUG = (*BASE, "--disable-cuda-graph", "--log-level", "debug")
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def seen(pid: int, started: float, argv: tuple[str, ...], **kw: object) -> Seen:
    return Seen(pid=pid, create_time=at(started).timestamp(), argv=argv, **kw)  # type: ignore[arg-type]


def test_three_attempts_become_three_launches_with_their_ends_and_changes() -> None:
    ports = (8000,)
    tracked = observe([], [seen(100, 0, EAGLE, cpu_s=30.0, listening=[])], at(1), ports)
    tracked = observe(tracked, [seen(100, 0, EAGLE, cpu_s=30.0, listening=[])], at(3), ports)
    assert tracked[0].launch.idle_s == 120.0 and tracked[0].launch.port_opened is False
    tracked = observe(tracked, [seen(200, 4, BASE, cpu_s=20.0, listening=[])], at(5), ports)
    tracked = observe(tracked, [], at(8), ports)
    tracked = observe(tracked, [seen(50299, 9, DEBUG, cpu_s=5.0, listening=[8000])], at(10), ports)
    launches = [t.launch for t in tracked]
    assert [launch.pid for launch in launches] == [100, 200, 50299]
    assert launches[0].outcome(at(10)) == "gone after 5 min"
    assert launches[1].outcome(at(10)) == "gone after 4 min"
    assert launches[2].outcome(at(12)) == "running for 3 min"
    assert [launch.port_opened for launch in launches] == [False, False, True]
    assert changes(launches) == [
        "",
        "relaunched with --speculative-algorithm EAGLE3 removed",
        "relaunched with --disable-cuda-graph, --log-level debug added",
    ]


def test_a_recycled_pid_is_a_new_launch_and_unknowns_stay_unknown() -> None:
    tracked = observe([], [seen(7, 0, BASE)], at(1))
    tracked = observe(tracked, [seen(7, 2, BASE)], at(3))
    assert [t.launch.started_at for t in tracked] == [at(0), at(2)]
    assert tracked[0].launch.ended_at == at(3) and tracked[1].launch.ended_at is None
    assert tracked[1].launch.port_opened is None and tracked[1].launch.idle_s is None
    assert changes([]) == []
