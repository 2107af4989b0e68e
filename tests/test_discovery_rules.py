"""Automatic watch proposals from parsed commands and from processes found running."""

from datetime import UTC, datetime

import pytest
from ctxd.discovery.procscan import Candidate
from ctxd.discovery.rules import (
    AUTO_WATCH_CAP,
    program_pattern,
    propose_for_command,
    propose_from_machine,
    watch_key,
)
from ctxd.discovery.shellparse import parse_command

AT = datetime(2026, 11, 30, 12, 1, tzinfo=UTC)
LAUNCH = (
    "cd sglang && HF_TOKEN=hf_x nohup python -m sglang.launch_server --tp 8 --port 30000 "
    "> server.log 2>&1 &"
)


def kinds(proposals: list[dict]) -> list[tuple[str, str]]:
    return [watch_key(p) for p in proposals]


def test_a_launch_gives_a_process_in_its_folder_expecting_its_port_and_its_log() -> None:
    proposals = propose_for_command(parse_command(LAUNCH), cwd="/srv/work", at=AT)
    assert kinds(proposals) == [
        ("process", r"sglang\.launch_server"),
        ("log", "/srv/work/sglang/server.log"),
    ]  # no port watch of its own: the process watch expects the port
    process = proposals[0]
    assert process["expect_ports"] == [30000] and process["env"] == ["HF_TOKEN"]
    assert process["cwd"] == "/srv/work/sglang"  # its own launches, not a namesake elsewhere
    assert all(p["auto"] is True for p in proposals)
    assert process["reason"] == "launched by the command at 12:01"


def test_harness_background_flag_makes_a_launch_without_ampersand() -> None:
    facts = parse_command("python serve.py --port 8000")
    assert propose_for_command(facts, cwd="/w", at=AT) == []
    proposals = propose_for_command(facts, cwd="/w", at=AT, background=True)
    assert kinds(proposals) == [("process", r"serve\.py")]
    assert proposals[0]["expect_ports"] == [8000] and proposals[0]["cwd"] == "/w"


def test_one_shot_tools_sent_to_the_background_are_not_launches() -> None:
    facts = parse_command("sleep 30 && tail -f server.log")
    assert propose_for_command(facts, cwd="/w", at=AT, background=True) == []
    assert propose_for_command(parse_command("sleep 60 &"), cwd="/w", at=AT) == []
    activated = parse_command("cd srv && source .venv/bin/activate && python serve.py; echo ok")
    proposals = propose_for_command(activated, cwd="/w", at=AT, background=True)
    assert kinds(proposals) == [("process", r"serve\.py")]


def test_builds_propose_their_outputs() -> None:
    facts = parse_command("cd sgl-kernel && python -m build --wheel")
    assert kinds(propose_for_command(facts, cwd="/w", at=AT)) == [
        ("artifact", "/w/sgl-kernel/dist")
    ]
    facts = parse_command("nvcc -o /w/bin/kern kern.cu")
    proposal = propose_for_command(facts, cwd="/w", at=AT)[0]
    assert proposal["path"] == "/w/bin/kern" and proposal["reason"] == "built by `nvcc` at 12:01"
    assert propose_for_command(parse_command("make -j8"), cwd="/w", at=AT) == []


def test_reads_become_logs_only_when_repeated() -> None:
    facts = parse_command("tail -n 50 server.log")
    assert propose_for_command(facts, cwd="/w", at=AT) == []
    again = propose_for_command(facts, cwd="/w", at=AT, read_counts={"/w/server.log": 1})
    assert kinds(again) == [("log", "/w/server.log")]


def test_duplicates_secrets_and_disallowed_paths_are_skipped() -> None:
    facts = parse_command(LAUNCH)
    first = propose_for_command(facts, cwd="/srv/work", at=AT)
    assert propose_for_command(facts, cwd="/srv/work", at=AT, existing=first) == []
    secret = parse_command("nohup ./run.sh > .env 2>&1 &")
    assert kinds(propose_for_command(secret, cwd="/w", at=AT)) == [("process", r"run\.sh")]
    outside = propose_for_command(
        parse_command("nohup ./run.sh > /var/log/r.log &"),
        cwd="/w",
        at=AT,
        allowed=lambda path: path.startswith("/w/"),
    )
    assert kinds(outside) == [("process", r"run\.sh")]


def test_cap_counts_existing_automatic_watches_only() -> None:
    existing = [{"kind": "log", "path": f"/w/{i}.log", "auto": True} for i in range(15)]
    existing.append({"kind": "log", "path": "/w/manual.log"})
    proposals = propose_for_command(parse_command(LAUNCH), cwd="/w", at=AT, existing=existing)
    assert len(proposals) == AUTO_WATCH_CAP - 15 == 1


def test_relative_paths_without_a_cwd_are_dropped() -> None:
    proposals = propose_for_command(parse_command("nohup ./a > a.log &"), cwd=None, at=AT)
    assert kinds(proposals) == [("process", "a")]


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["python3", "-u", "-m", "sglang.launch_server", "--tp", "8"], r"sglang\.launch_server"),
        (["/venv/bin/python", "/w/serve.py"], r"serve\.py"),
        (["python", "-c", "print(1)"], None),
        (["./run.sh"], r"run\.sh"),
        ([], None),
    ],
)
def test_program_pattern(argv: list[str], pattern: str | None) -> None:
    assert program_pattern(argv) == pattern


def test_machine_proposals_from_roots_and_their_stdout() -> None:
    root = Candidate(50299, 1, "python", ["python", "-m", "sglang.launch_server"], "/w", 0, 50299)
    worker = Candidate(50310, 50299, "python", ["python", "-c", "x"], "/w", 0, 50299)
    proposals = propose_from_machine([(root, ["/w/server.log"]), (worker, ["/w/server.log"])])
    assert kinds(proposals) == [("process", r"sglang\.launch_server"), ("log", "/w/server.log")]
    assert proposals[1]["reason"] == "stdout of pid 50299"


def test_proposals_are_valid_watch_specs_once_auto_and_reason_are_taken_off() -> None:
    from ctxd.models import WatchIn

    facts = parse_command(LAUNCH + "; cd sgl-kernel && python -m build --wheel")
    proposals = propose_for_command(facts, cwd="/srv/work", at=AT)
    assert {p["kind"] for p in proposals} == {"process", "log", "artifact"}
    for proposal in proposals:
        spec = {k: v for k, v in proposal.items() if k not in ("auto", "reason")}
        assert WatchIn.model_validate(spec).root.kind == proposal["kind"]


def test_a_ray_cluster_started_or_submitted_to_is_watched_by_its_dashboard():
    """`ray start --head` (its dashboard port, 8265 by default; an all-interfaces host read
    as this machine's) and `ray job submit --address URL` each make one ray watch."""

    def rays(command: str) -> list[str]:
        found = propose_for_command(parse_command(command), cwd="/w", at=AT)
        return [p["url"] for p in found if p["kind"] == "ray" and "url" in p]

    assert rays("ray start --head --port=6379 --dashboard-port=8300") == ["http://127.0.0.1:8300"]
    assert rays("ray start --head --dashboard-host 0.0.0.0") == ["http://127.0.0.1:8265"]
    assert rays("ray job submit --address http://127.0.0.1:8265 -- python train.py") == [
        "http://127.0.0.1:8265"
    ]
    assert rays("RAY_ADDRESS=http://10.0.0.5:8265 ray job submit -- python t.py") == [
        "http://10.0.0.5:8265"
    ]
    assert rays("ray status") == []


@pytest.mark.parametrize(
    ("command", "url"),
    [
        ("curl -sf http://127.0.0.1:30000/health", "http://127.0.0.1:30000/health"),
        ("curl -s localhost:30000/health_generate", "http://localhost:30000/health_generate"),
        ("wget -qO- http://localhost:30000/v1/models", "http://localhost:30000/v1/models"),
        ("python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:30000/health\")'",
         "http://127.0.0.1:30000/health"),
        ("sleep 5; curl -s -o /dev/null -w '%{http_code}' http://[::1]:30000/readyz",
         "http://[::1]:30000/readyz"),
    ],
)  # fmt: skip
def test_the_health_url_the_agent_asks_of_its_server_is_watched(command: str, url: str):
    """A look at a health URL of a server the session expects (its process watch's port) makes
    a port watch with that URL, so ctxd asks it too and "serving" rests on its answer."""
    server = {"kind": "process", "match": r"serve\.py", "expect_ports": [30000], "auto": True}
    proposals = propose_for_command(parse_command(command), cwd="/w", at=AT, existing=[server])
    assert [(p["kind"], p["port"], p["url"]) for p in proposals] == [("port", 30000, url)]
    assert proposals[0]["reason"] == "health URL the command at 12:01 asked"
    # launched and checked in one line: the launch's own port
    both = propose_for_command(
        parse_command(f"nohup python3 serve.py --port 30000 > s.log 2>&1 & sleep 3; {command}"),
        cwd="/w", at=AT,
    )  # fmt: skip
    assert ("port", 30000, url) in [(p["kind"], p.get("port"), p.get("url")) for p in both]


@pytest.mark.parametrize(
    "command",
    [
        "curl -X POST http://127.0.0.1:30000/health",  # another method
        "curl http://127.0.0.1:30000/health -d '{}'",  # a body
        "curl -s http://127.0.0.1:30000/generate",  # not a health URL: it may do work
        "curl -s http://127.0.0.1:30000/health?text=x",  # a query: not a plain look
        "curl -s http://10.0.0.7:30000/health",  # another machine
        "curl -s http://127.0.0.1:9999/health",  # a port no watch expects
        "python3 -c 'import urllib.request as u;"
        " u.urlopen(\"http://127.0.0.1:30000/health\", data=b\"x\")'",
    ],
)  # fmt: skip
def test_a_request_that_is_more_than_a_look_or_not_to_its_server_is_not_watched(command: str):
    server = {"kind": "process", "match": r"serve\.py", "expect_ports": [30000], "auto": True}
    assert propose_for_command(parse_command(command), cwd="/w", at=AT, existing=[server]) == []


def test_a_variable_the_line_exports_is_one_the_process_watch_shows():
    """`export HF_TOKEN=…; nohup …`: the launch's watch names it, so the running attempt's
    environment block shows it (redacted), as for `HF_TOKEN=… nohup …`."""
    line = "export HF_TOKEN=hf_x NCCL_DEBUG=INFO; nohup python serve.py --port 8000 > s.log 2>&1 &"
    (process,) = [p for p in propose_for_command(parse_command(line), cwd="/w", at=AT)
                  if p["kind"] == "process"]  # fmt: skip
    assert process["env"] == ["HF_TOKEN", "NCCL_DEBUG"]
