"""A long session stays readable: 200 real launches of a server, each with other flags and
each dying with its own error in its own log but the last, which runs; 2,000 ordinary
commands and 20 user instructions between them, all through the hook endpoint as Claude Code
sends them. Then "continue": the dump that comes back within the harness's budget holds what
a resuming agent needs, and search finds the first attempt."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx

from tests.conftest import Server, claude_hooks, tagged, wait_until

LAUNCHES = 200
COMMANDS = 2_000
INSTRUCTIONS = 20
BUDGET = 9_500

# NCCL's own algorithm names; the user asks for one every INSTRUCTIONS-th launch, and the
# launches that follow use it, as an agent does what it was told.
ALGOS = ("Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")
SERVER = textwrap.dedent(
    """
    import os, socket, subprocess, sys, time
    if sys.argv[1] == "--worker":  # one rank: up while its launcher is
        import threading
        held = b"\x01" * (32 << 20)  # its host-side buffers, resident
        for _ in range(2):  # its NCCL proxy and watchdog threads, idle
            threading.Thread(target=threading.Event().wait, daemon=True).start()
        parent = os.getppid()
        while os.getppid() == parent:
            time.sleep(0.5)
        sys.exit(0)
    run = int(sys.argv[sys.argv.index("--run") + 1])
    port = int(sys.argv[sys.argv.index("--port") + 1])
    algo = sys.argv[sys.argv.index("--nccl-algo") + 1]
    os.environ["NCCL_ALGO"] = algo  # for the ranks' NCCL (set here: not in this one's environ)
    print(f"serve.py: --nccl-algo {algo}: NCCL_ALGO={algo} for the ranks", flush=True)
    nic = os.environ.get("NCCL_SOCKET_IFNAME", "eth0")
    print(f"NCCL INFO Bootstrap : Using {nic}:{'127.0.0.1' if nic == 'lo' else '10.0.3.5'}<0>",
          flush=True)
    if nic == "eth0":  # its peers are told 10.0.3.7, a host long gone: nothing listens there
        print(f"NCCL WARN socketStartConnect: Connect to 10.0.3.7<{port + 1000}> failed :"
              " Connection refused", flush=True)
        print("torch.distributed.DistBackendError: NCCL error in:"
              " ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error (run"
              f" with NCCL_DEBUG=INFO for details), NCCL version 2.21.5; socketStartConnect:"
              f" Connect to 10.0.3.7<{port + 1000}> failed : Connection refused",
              file=sys.stderr)
        sys.exit(1)
    ranks = [subprocess.Popen([sys.executable, "serve.py", "--worker", str(r)],
                              env={**os.environ, "RANK": str(r)}) for r in range(8)]
    listener = socket.create_server(("127.0.0.1", port))
    print("NCCL INFO comm initialised: 8 ranks; waiting for the first request", flush=True)
    served = 0
    while True:  # HTTP, as a server answers its health check
        conn = listener.accept()[0]
        request = conn.recv(4096).decode(errors="replace").split(" ")
        served += 1
        conn.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: 14\\r\\n\\r\\nok: 8 ranks up")
        conn.close()
        path = request[1] if len(request) > 1 else "?"
        print(f"serve.py: request {served}: GET {path} 200, served by 8 ranks", flush=True)
    """
)
# The last instruction says what fixes it: the NIC, not the algorithm the others kept trying.
LAST = (
    "Instruction 20: NCCL dials 10.0.3.7 over eth0, our old head node, retired last week:"
    " nothing listens there now. Bind NCCL to the loopback (NCCL_SOCKET_IFNAME=lo) and go back"
    " to --nccl-algo PAT"
)


def algo(run: int) -> str:
    return ALGOS[(run // (LAUNCHES // INSTRUCTIONS)) % len(ALGOS)]


def test_two_hundred_launches_and_two_thousand_commands_fit_one_continue(
    rooted_server: Server, tmp_path: Path, tag: str
):
    server = rooted_server
    workspace = tmp_path / "nccl-hunt"
    (workspace / "logs").mkdir(parents=True)
    (workspace / "serve.py").write_text(SERVER)
    client = httpx.Client(base_url=server.url, timeout=60)

    hook = claude_hooks(client, "long-1", workspace)

    def bash(command: str, n: int, stdout: str = "") -> None:
        hook("PostToolUse", tool_name="Bash", tool_use_id=f"toolu_{n}",
             tool_input={"command": command},
             tool_response={"stdout": stdout, "stderr": "", "interrupted": False})  # fmt: skip

    # the agent's shell finds this interpreter as `python3`, as a person types it
    shell = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    hook("UserPromptSubmit", prompt="Find why the 8-GPU server dies with NCCL errors at start")
    calls = 0
    for run in range(1, LAUNCHES + 1):
        if run % (LAUNCHES // INSTRUCTIONS) == 0:
            said = f"Instruction {run // 10}: next try --nccl-algo {algo(run)}"
            hook("UserPromptSubmit", prompt=LAST if run == LAUNCHES else said)
        nic = "lo" if run == LAUNCHES else "eth0"
        line = (f"NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME={nic} nohup python3 serve.py"
                f" --run {run} --port {50000 + run} --nccl-algo {algo(run)} --tag {tag}"
                f" > logs/run{run}.log 2>&1 &")  # fmt: skip
        subprocess.run(["bash", "-c", line], cwd=workspace, env=shell, check=True, timeout=30)
        calls += 1
        bash(line, calls)
        for step in range(COMMANDS // LAUNCHES):
            calls += 1
            bash(f"tail -n {step + 1} logs/run{run}.log", calls)
    latest = LAST
    sid = "nccl-hunt"
    wait_until(lambda: "waiting" in _log(workspace, LAUNCHES), "the last run to start")

    def ended(run: int) -> bool:  # its error is stored with its attempt (and searchable)
        q = f'"{50000 + run + 1000}"'
        found = client.get(f"/api/sessions/{sid}/search", params={"q": q}).json()["hits"]
        return any(hit["source"] == "launch" for hit in found)

    # The settling snapshot after the last launch (a second after it) judges the one before:
    # any earlier snapshot may come within the second a launch's process may take to start.
    wait_until(lambda: ended(LAUNCHES - 1), "the last failed run seen to end")
    # the agent asks the server for its health, as one checks that a server serves
    url = f"http://127.0.0.1:{50000 + LAUNCHES}/health"
    check = f"python3 -c 'import urllib.request as u; print(u.urlopen(\"{url}\").read())'"
    answer = subprocess.run(["bash", "-c", check], cwd=workspace, check=True, timeout=30,
                            capture_output=True, text=True).stdout  # fmt: skip
    assert "ok: 8 ranks up" in answer, answer
    calls += 1
    bash(check, calls, answer)
    # the user comes back once the last run has served a while, well past the ones that died
    time.sleep(15)

    dump = hook("UserPromptSubmit", prompt="continue")["context"]
    (Path(__file__).parent / "artifacts").mkdir(exist_ok=True)
    (Path(__file__).parent / "artifacts" / "long_session_continue.md").write_text(dump)
    assert len(dump) <= BUDGET
    (live,) = [p for p in tagged(tag)]
    assert "dies with NCCL errors" in dump  # the objective
    assert latest in dump  # the latest instruction
    assert f"(pid {live})" in dump and f"--run {LAUNCHES}" in dump  # the running attempt
    # serving, as the health URL the agent asked answers ctxd too (not a bare open port)
    asked = f"ctxd asked its health URL as it took this dump: {url} answered HTTP 200"
    assert f"{asked} “ok: 8 ranks up”" in dump, dump
    last_failed = LAUNCHES - 1
    assert f"--run {last_failed} " in dump  # the last failed attempt's flags ...
    assert f"Connect to 10.0.3.7<{51000 + last_failed}> failed" in dump  # ... its error
    assert f"attempt {LAUNCHES}**" in dump  # how many attempts there were
    newest = [f"**attempt {n}**" for n in (LAUNCHES - 1, LAUNCHES)]
    assert dump.index(newest[0]) < dump.index(newest[1])  # in the order they were made
    assert "attempts 1\N{EN DASH}" in dump  # the older ones, folded, not dropped
    # ... with the values their flags took, and their error as read, not digit-masked
    folded = dump.split("attempts 1\N{EN DASH}")[1].split("\n")[0]
    assert "varied: --nccl-algo " in folded and "NVLS" in folded, folded
    assert "--run 1, 2, " in folded or "--run 1…" in folded, folded  # the first one's too
    assert "Connect to 10.0.3.7<51194> failed" in folded, folded
    # a newer run of alike failures says the algorithm they all kept, not only what varied
    recent = [row for row in dump.splitlines() if row.startswith("| **attempts 1")][1:]
    assert all("all with --nccl-algo " in row for row in recent), recent
    for section in ("## Handover", "## Now", "## Attempts", "## Recent commands"):
        assert section in dump, section
    logs = dump.split("## Logs")[1].split("\n## ")[0]
    assert f"logs/run{LAUNCHES}.log\n" in logs  # the running attempt's log is watched ...
    assert "logs/run1.log" not in logs  # ... not the first runs' (they ended long ago)

    found = client.get(f"/api/sessions/{sid}/search", params={"q": "50001"}).json()
    assert any("--run 1 " in hit["snippet"] for hit in found["hits"]), found


def _log(workspace: Path, run: int) -> str:
    path = workspace / "logs" / f"run{run}.log"
    return path.read_text() if path.exists() else ""
