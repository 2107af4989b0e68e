"""Slurm's answers parsed: `scontrol show job -o` as Slurm 22.05 printed it (captured from a
real single-node cluster, paths replaced), and sacct's `-P` format."""

import os
import time
from datetime import UTC
from pathlib import Path

from ctxd.collectors._slurm_parse import (
    Job,
    duration,
    exit_status,
    expand,
    fields,
    from_sacct,
    from_scontrol,
    timestamp,
)
from ctxd.collectors.slurm import output_files, output_paths

CAPTURED = Path(__file__).parent / "slurm_outputs" / "scontrol-show-job-o-22.05.txt"


def test_scontrol_lines_of_22_05() -> None:
    jobs = {job.name: job for job in from_scontrol(CAPTURED.read_text())}

    assert set(jobs) == {"ok", "bad", "grow", "sig", "pend", "dflt"}
    ok, bad, sig, pend, grow = jobs["ok"], jobs["bad"], jobs["sig"], jobs["pend"], jobs["grow"]
    assert (ok.job_id, ok.state, ok.exit_code, ok.signal, ok.nodes) == (
        "1",
        "COMPLETED",
        0,
        None,
        "vm",
    )
    assert ok.stdout == "/home/ada/run/ok.out" and ok.stderr == "/home/ada/run/ok.err"
    assert ok.user == "root" and ok.workdir == "/home/ada/run" and ok.reason is None
    assert (bad.state, bad.reason, bad.exit_code) == ("FAILED", "NonZeroExitCode", 3)
    assert (sig.state, sig.exit_code, sig.signal) == ("FAILED", 0, 9)
    assert pend.state == "PENDING" and pend.nodes == "" and pend.started_at is None
    assert pend.reason == "ReqNodeNotAvail, May be reserved for other job"
    assert grow.time_limit_s == 300 and ok.time_limit_s is None
    assert ok.started_at is not None and ok.ended_at is not None
    assert (ok.ended_at - ok.started_at).total_seconds() == 2
    assert output_files(ok) == ["/home/ada/run/ok.out", "/home/ada/run/ok.err"]
    assert output_files(bad) == ["/home/ada/run/bad.out"]  # stderr is the same file


def test_a_value_with_spaces_runs_to_the_next_key() -> None:
    line = "JobId=9 JobName=a b Reason=Dependency Command=/bin/x --flag=1 y WorkDir=/w"
    f = fields(line)
    assert f["JobName"] == "a b" and f["WorkDir"] == "/w"
    assert f["Command"] == "/bin/x --flag=1 y"  # `--flag=` starts with a dash: not a key


def test_sacct_parsable_rows() -> None:
    text = (
        "42|train|OUT_OF_MEMORY|0:125|gpu[01-02]|2026-11-30T10:00:00|2026-11-30T10:01:00|"
        "2026-11-30T11:01:00|1-00:00:00|ada|/home/ada/run|None\n"
        "43|eval|CANCELLED by 1000|0:15|gpu03|2026-11-30T10:00:00|Unknown|Unknown|"
        "UNLIMITED|ada|/home/ada/run|None\n"
        "garbage line\n"
    )
    oom, cancelled = from_sacct(text)
    assert (oom.state, oom.exit_code, oom.signal, oom.nodes) == (
        "OUT_OF_MEMORY",
        0,
        125,
        "gpu[01-02]",
    )
    assert oom.time_limit_s == 86400 and oom.source == "sacct" and oom.stdout is None
    assert (cancelled.state, cancelled.signal, cancelled.started_at) == ("CANCELLED", 15, None)


def test_numbers_and_patterns() -> None:
    assert exit_status("3:0") == (3, None) and exit_status("0:9") == (0, 9)
    assert exit_status("") == (None, None)
    assert duration("00:05:00") == 300 and duration("2-01:00:00") == 176400
    assert duration("30") == 1800 and duration("01:30") == 90
    assert duration("UNLIMITED") is None and duration("N/A") is None and duration("x:y") is None
    job = Job(job_id="77_3", name="sweep", user="ada", nodes="gpu01,gpu02", workdir="/w")
    assert expand("logs/%x-%A_%a.%j.%u.%N.out%%", job) == "logs/sweep-77_3.77.ada.gpu01.out%"
    job.stdout = "logs/%x-%j.out"
    assert output_files(job) == ["/w/logs/sweep-77.out"]


def test_a_job_that_ends_is_an_event() -> None:
    from ctxd.models import Observations, SlurmJobInfo, SlurmSection
    from ctxd.snapshotter import happened

    def seen(*states: tuple[str, str]) -> Observations:
        jobs = [SlurmJobInfo(watch_id=1, job_id=i, label=f"job {i}", state=s) for i, s in states]
        return Observations(slurm=SlurmSection(items=jobs))

    before = seen(("1", "RUNNING"), ("2", "PENDING"), ("3", "FAILED"))
    after = seen(("1", "OUT_OF_MEMORY"), ("2", "RUNNING"), ("3", "FAILED"))

    assert happened.events(before, after) == [("slurm-job-end", "slurm job 1 ended OUT_OF_MEMORY")]
    assert happened.events(after, after) == []


def test_slurm_local_times_are_read_as_local_and_kept_in_utc() -> None:
    was = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        winter, summer = timestamp("2026-01-15T10:00:00"), timestamp("2026-07-15T10:00:00")
    finally:
        if was is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = was
        time.tzset()
    assert winter is not None and summer is not None
    assert winter.tzinfo == UTC and winter.isoformat() == "2026-01-15T15:00:00+00:00"
    assert summer.tzinfo == UTC and summer.isoformat() == "2026-07-15T14:00:00+00:00"
    assert timestamp("Unknown") is None and timestamp("not a time") is None


def test_patterns_as_sbatch_expands_them() -> None:
    job = Job(job_id="77_13", number="90", name="sweep", user="ada", nodes="gpu[07-08],cpu1")
    assert expand("%4j-%J.%s.%n.%t-%A_%3a-%b", job) == "0090-90.batch.0.0-77_013-3"
    assert expand("%x.%N.%5x.%u.%%j.%q", job) == "sweep.gpu07.sweep.ada.%j.%q"
    assert expand("%12j", job) == "0000000090"  # Slurm pads to 10 at most
    assert expand("no\\\\%j", job) == "no%j"  # a backslash turns patterns off
    assert expand("%j", Job(job_id="5")) == "5"


def test_output_paths_as_files() -> None:
    job = Job(job_id="5", workdir="/w", stdout="/dev/null", stderr="e-%j.err")
    assert output_paths(job) == ("/dev/null", "/w/e-5.err")
    assert output_files(job) == ["/w/e-5.err"]
    job.stdout = job.stderr = "both-%4j.log"
    assert output_paths(job) == ("/w/both-0005.log", "/w/both-0005.log")
    assert output_files(job) == ["/w/both-0005.log"]
    assert output_paths(Job(job_id="5")) == (None, None)


def test_a_requeued_job_has_not_ended_and_has_not_failed() -> None:
    from ctxd.models import Observations, SlurmJobInfo, SlurmSection
    from ctxd.signals import slurm as signals_slurm
    from ctxd.snapshotter import happened

    def seen(state: str) -> Observations:
        job = SlurmJobInfo(watch_id=1, job_id="1", label="job 1", state=state)
        return Observations(slurm=SlurmSection(items=[job]))

    running, requeued, pending = seen("RUNNING"), seen("REQUEUED"), seen("PENDING")
    assert happened.events(running, requeued) == []
    assert happened.events(requeued, pending) == []
    assert signals_slurm.slurm_jobs(requeued) == []
    assert happened.events(pending, seen("NODE_FAIL")) == [
        ("slurm-job-end", "slurm job 1 ended NODE_FAIL")
    ]
    (failed,) = signals_slurm.slurm_jobs(seen("NODE_FAIL"))
    assert failed.code == "slurm_failed"
    assert signals_slurm.slurm_jobs(seen("COMPLETED")) == []


def test_a_host_list_counts_its_hosts() -> None:
    from ctxd.collectors._slurm_parse import host_count

    assert host_count("gpu[07-08,10],cpu1") == 4
    assert host_count("node1") == 1 and host_count("a[1-3],b[5]") == 4 and host_count("") == 0


def test_a_job_allocated_gpus_is_told_apart() -> None:
    """Its AllocTRES names gres/gpu: a step collecting beside it must ask for no GPU."""
    line = CAPTURED.read_text().splitlines()[0]
    (plain,) = from_scontrol(line)
    with_gpus = line.rstrip() + " AllocTRES=cpu=1,mem=1G,node=1,billing=1,gres/gpu=2"
    (held,) = from_scontrol(with_gpus)
    assert not plain.gpus and held.gpus


def test_sstat_lines_become_steps_with_cpu_seconds_and_bytes() -> None:
    """sstat's parsable output as Slurm 22.05 prints it: a step's CPU in [d-][h:]m:s[.ms],
    memory with a K/M/G suffix; a line of another shape is left out."""
    from ctxd.collectors._slurm_steps import cpu_time, memory, parse

    text = (
        "41.0|4|00:01:02|00:00.500|1234K|node7|1000K\n"
        "41.batch|1|1-02:03:04|1-02:03:04|1.5G|node1|0\n"
        "garbage line\n"
    )
    steps = parse(text)
    assert [(s.step, s.tasks, s.cpu_s, s.min_cpu_s) for s in steps] == [
        ("41.0", 4, 62.0, 0.5),
        ("41.batch", 1, 93784.0, 93784.0),
    ]
    assert (steps[0].max_rss_bytes, steps[0].max_rss_node, steps[0].ave_rss_bytes) == (
        1234 * 1024,
        "node7",
        1000 * 1024,
    )
    assert steps[1].max_rss_bytes == int(1.5 * 1024**3) and steps[1].ave_rss_bytes == 0
    assert cpu_time("") is None and cpu_time("12") is None and cpu_time("a:b") is None
    assert memory("") is None and memory("12X") is None
