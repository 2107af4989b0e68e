"""The relaunch block: run what the dump says, get the same process back (real processes)."""

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

from ctxd.collectors import CollectContext, processes
from ctxd.collectors.proc import relaunch
from ctxd.models import (
    Observations,
    ProcessesSection,
    ProcessWatch,
    Snapshot,
    SnapshotHeader,
    Watch,
)
from ctxd.render.markdown import render_dump
from ctxd.settings import Settings

from tests.conftest import wait_until

# Writes what it was started with (argv, directory, the variables that matter), then waits.
PROGRAM = """
import json, os, sys, time
seen = {"argv": sys.argv[1:], "cwd": os.getcwd(),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "HF_"))}}
with open(sys.argv[sys.argv.index("--report") + 1], "w") as out:
    json.dump(seen, out)
print("started", flush=True)
time.sleep(60)
"""


def wait_for(path: Path) -> dict:
    wait_until(lambda: path.exists() and path.read_text(), f"{path} written")
    return json.loads(path.read_text())


def collect(tag: str) -> list:
    watch = Watch(id=1, session="s", created_at=datetime.now(UTC), spec=ProcessWatch(match=tag))
    return processes.collect([watch], CollectContext(settings=Settings(cpu_sample_s=0))).items


def test_the_relaunch_block_starts_the_same_process_again(spawn, tmp_path: Path) -> None:
    tag = f"ctxd-relaunch-{uuid.uuid4().hex[:10]}"
    work = tmp_path / "run dir"  # a space: the block must quote
    work.mkdir()
    token = "hf_" + uuid.uuid4().hex + "Zq"
    env = {**os.environ, "NCCL_DEBUG": "INFO", "HF_TOKEN": token}
    env.pop("NCCL_SOCKET_IFNAME", None)
    with open(work / "server.log", "w") as log:
        first = spawn(sys.executable, "-c", PROGRAM, tag, "--model", "it's a model",
                      "--report", str(work / "first.json"), cwd=work, env=env,
                      stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    original = wait_for(work / "first.json")

    (root,) = [p for p in collect(tag) if p.pid == first.pid]
    block = root.relaunch
    assert block[0] == "# 1 value reads [REDACTED]: fill in the real value before running"
    assert f"cd {relaunch.shlex.quote(str(work))}" in block
    assert "export NCCL_DEBUG=INFO" in block and "export HF_TOKEN='[REDACTED]'" in block
    assert token not in "\n".join(block)
    assert block[-1].startswith("nohup ")  # it ran detached, its output to a file
    assert block[-1].endswith(f" > {relaunch.shlex.quote(str(work / 'server.log'))} 2>&1 &")
    assert "'it'\"'\"'s a model'" in block[-1]  # argv shell-quoted

    # Run the block as the dump prints it, the secret filled in, the report sent elsewhere.
    script = "\n".join(block).replace("[REDACTED]", token).replace("first.json", "second.json")
    subprocess.run(["bash", "-c", script], check=True, timeout=10, env={"PATH": os.environ["PATH"]})
    again = wait_for(work / "second.json")
    try:
        assert again["cwd"] == original["cwd"]
        assert again["env"] == original["env"]
        assert again["argv"] == [a.replace("first.json", "second.json") for a in original["argv"]]
        assert (work / "server.log").read_text().count("started") >= 1
    finally:
        for p in collect(tag):
            os.kill(p.pid, 9)

    header = SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t")
    markdown = render_dump(
        Snapshot(header=header, observations=Observations(processes=ProcessesSection(items=[root])))
    )
    assert "To start it again as it ran" in markdown
    assert "```sh\n# 1 value reads [REDACTED]" in markdown


def test_without_a_readable_login_shell_every_selected_variable_is_exported() -> None:
    lines = relaunch.block(
        ["python", "-m", "x"], "/srv/a", {"NCCL_DEBUG": "WARN", "HOME": "/root"},
        ("NCCL_*",), pid=-1, login=None,
    )  # fmt: skip
    assert lines == [
        "# a login shell's environment could not be read: all selected variables",
        "cd /srv/a",
        "export NCCL_DEBUG=WARN",
        "python -m x",
    ]


def test_a_selected_variable_the_login_shell_sets_and_the_process_lacks_is_unset() -> None:
    lines = relaunch.block(
        ["sleep", "1"], None, {"NCCL_DEBUG": "INFO"}, ("NCCL_*", "CUDA_*"), pid=-1,
        login={"NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0", "PATH": "/bin"},
    )  # fmt: skip
    assert lines == ["unset CUDA_VISIBLE_DEVICES", "sleep 1"]


def test_the_login_environment_is_read_from_a_real_login_shell() -> None:
    env = relaunch.login_env()
    assert env is not None and env.get("HOME") and "PATH" in env


def test_a_login_shell_past_its_time_is_killed_with_what_it_started(tmp_path: Path) -> None:
    started = tmp_path / "started.pid"
    shell = tmp_path / "slow-shell"
    # a shell that would wait ten minutes: past its time it is killed, or the test times out
    shell.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {started}\nwait\n")
    shell.chmod(0o755)
    assert relaunch._read_login_env(shell=str(shell), timeout=1.0) is None
    child = int(started.read_text())
    wait_until(lambda: not _alive(child), "the profile's child ended with the login shell")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_output_to_a_file_without_a_name_is_no_redirection_to_write(tmp_path: Path) -> None:
    """A process writing to an anonymous file (O_TMPFILE, as pytest's own capture makes) shows
    it as `DIR/#INODE`: a name no shell can open again, so the block leaves it out; a named
    file stays."""
    import tempfile

    named = tmp_path / "server.log"
    with tempfile.TemporaryFile(dir=tmp_path) as anonymous, open(named, "w") as log:
        child = subprocess.Popen(["sleep", "60"], stdout=anonymous, stderr=log)
        try:
            assert "#" in os.readlink(f"/proc/{child.pid}/fd/1")  # anonymous, as said
            pieces = relaunch.redirections(child.pid)
        finally:
            child.kill()
            child.wait()
    words = [word for word, _ in pieces]
    assert len(words) == 2 and words[0] == "2>" and str(named) in words[1], words
