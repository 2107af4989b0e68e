"""A budget cut renders one snapshot again after each step; the sections a step left as they
were are reused, never a section whose values changed: each render of the cut is the text a
fresh render of the same snapshot gives."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ctxd.models import (
    HostInfo,
    JournalIn,
    LogWatch,
    Observations,
    PortWatch,
    ProcessWatch,
    SessionIn,
)
from ctxd.render import reuse
from ctxd.settings import Settings
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store
from ctxd.usecases import recovery

from tests.conftest import wait_until

SERVER = """
import socket, sys, time
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
with open(sys.argv[1], "a") as log:
    print(f"listening on {sock.getsockname()[1]}", file=log, flush=True)
    for n in range(40):
        print(f"[rank {n % 4}] step {n}: loss {1 / (n + 1):.4f}", file=log, flush=True)
time.sleep(600)
"""


@pytest.fixture
def snap(tmp_path: Path):
    settings = Settings(data_dir=tmp_path / "data", cpu_sample_s=0, watch_roots=[tmp_path])
    store = Store(settings.db_path)
    snapshotter = Snapshotter(settings, store)
    yield snapshotter
    snapshotter.close()
    store.close()


def test_each_render_of_a_cut_is_a_fresh_render_of_its_snapshot(snap: Snapshotter, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for n in range(1, 7):  # runs that died, each with its error and a tail of lines
        lines = [f"[run {n}] step {k}" for k in range(30)]
        text = "\n".join([*lines, f"RuntimeError: NCCL error in run {n} (code {50 + n})", ""])
        (logs / f"run{n}.log").write_text(text)
    tag = f"reuse-{tmp_path.name}"
    script = tmp_path / f"{tag}.py"
    script.write_text(SERVER)
    live_log = logs / "live.log"
    server = subprocess.Popen([sys.executable, str(script), str(live_log)])
    try:
        wait_until(lambda: live_log.exists() and "step 39" in live_log.read_text(), "its log")
        port = int(live_log.read_text().split()[2])
        with socket.create_connection(("127.0.0.1", port)):
            pass  # it answers
        store, sid = snap.store, "cut"
        store.put_session(sid, SessionIn(objective="Find why the server dies at start"))
        limit = snap.settings.limits.max_watches_per_session
        store.add_watch(sid, ProcessWatch(match=tag, expect_ports=[port]), limit)
        store.add_watch(sid, PortWatch(port=port), limit)
        for path in sorted(logs.iterdir()):
            store.add_watch(sid, LogWatch(path=str(path)), limit)
        for n in range(8):
            store.add_entry(sid, JournalIn(kind="finding", text=f"finding {n}: " + "x" * 300))
        snapshot = snap.take(sid, force=True)

        copy = snapshot.model_copy(deep=True)
        left: dict[str, str] = {}
        reused = reuse.Sections()
        first = snap.render(copy, for_model=True, reused=reused)
        assert first == snap.render(copy, for_model=True)
        reused.keep()
        kept = len(reused.texts)
        assert kept >= 3  # the narrative, the processes, the logs, ...
        snap.render(copy, for_model=True, left_out={"host": "the host"}, reused=reused)
        assert len(reused.texts) == kept  # a section left out: every other one reused
        changed = 0
        for step in recovery.SHRINK_STEPS:  # every step, each on what the ones before left
            before = copy.model_dump_json(), dict(left)
            step(copy, left)
            cut = snap.render(copy, for_model=True, left_out=left, reused=reused)
            assert cut == snap.render(copy, for_model=True, left_out=left), step
            changed += (copy.model_dump_json(), left) != before
        assert changed >= 5  # the steps cut something: logs, findings, rows, ...
        assert len(reused.texts) > kept  # and the sections they cut were rendered again
    finally:
        server.kill()
        server.wait()


def test_a_section_is_reused_only_for_the_values_it_reads():
    # what each partial reads, as its template says: the logs read the logs of `o`, the
    # version's time and whether the dump is the model's; the host only `o.host`
    assert reuse._READS["_logs.md.j2"] == {
        "for_model": None, "h": ("taken_at",), "o": ("logs",),
    }  # fmt: skip
    assert reuse._READS["_host.md.j2"] == {"o": ("host",)}


def test_a_section_is_keyed_by_the_content_of_what_it_reads_or_not_reused():
    host = HostInfo(hostname="gpu-node-1", load_1m=0.5)
    same = HostInfo(hostname="gpu-node-1", load_1m=0.5)
    key = reuse._key("_host.md.j2", {"o": Observations(host=host)})
    assert key is not None and key == reuse._key("_host.md.j2", {"o": Observations(host=same)})
    other = Observations(host=HostInfo(hostname="gpu-node-2", load_1m=0.5))
    assert reuse._key("_host.md.j2", {"o": other}) != key
    # what its JSON would not tell (an object of no known shape): no key, rendered each time
    assert reuse._key("_host.md.j2", {"o": object()}) is None
