"""A long session's "continue": the dump's time and the data it keeps, next to a small session's.

Run: .venv/bin/python -m bench.bench_long_session [--runs 15] [--launches 2000] [--hooks]
Two real `ctxd serve`, each with its own temporary data directory and workspace, each fed
what Claude Code's hooks send: a small session of 10 commands (one of them a launch) and a
long one of 2,000 launches of a server, each followed by 10 ordinary commands (20,000), with
a user instruction every 100 launches. A launch is the agent's background command
(`nohup python3 serve.py --run N --port P > logs/runN.log 2>&1 &`); nothing is started, but
each run's log is written first with the error that run died of, for ctxd to read. At each
instruction (a person typing: a pause of seconds) the bench waits for the settling snapshot
ctxd takes a second after a burst of launches, as it comes in a real session. Then
"continue" (`UserPromptSubmit`) through the hook endpoint, the two sessions in turn: medians
over `--runs`, and the size of each data directory (database with its WAL, and the files).
Run alone, it appends its figures to bench/results.jsonl (mode `long_session`).

The small session is built event by event through `POST /api/hooks/claude`. The long one
goes through `POST /api/sessions/{sid}/actions` in batches of 100 actions, mapped from the
same Claude Code payloads by the function the hook endpoint runs (`harness.claude.tool_actions`):
the same use case, recorded the same way, with fewer requests. `--hooks` builds it event by
event through the hook endpoint instead (slower).
"""

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import httpx
from ctxd.harness.claude import tool_actions as from_claude

from bench import table
from bench.scenario import Server, start_server
from bench.timing import p95

LAUNCHES = 2000
COMMANDS_PER_LAUNCH = 10  # 20,000 ordinary commands for 2,000 launches
INSTRUCTION_EVERY = 100  # launches between two user instructions
SMALL_COMMANDS = 10  # the small session: one launch and 9 ordinary commands
BATCH = 100  # the most actions one POST …/actions takes
SETTLE_WAIT_S = 60.0
AIM_RATIO, AIM_MS, AIM_MB = 1.5, 100.0, 50.0
CONVERSATION = "4f1d2c3b-8e7a-4b6c-9d0e-1a2b3c4d5e6f"
OBJECTIVE = "Find why the 8-GPU server dies with NCCL errors at start"


def row(name: str, value: str, note: str = "") -> None:
    print(f"  {name:<44} {value:>14}  {note}")


class Session:
    """One workspace and the ctxd that watches it, fed through Claude Code's hook events."""

    def __init__(self, root: Path, name: str) -> None:
        self.workspace = root / name
        (self.workspace / "logs").mkdir(parents=True)
        (self.workspace / "serve.py").write_text("import sys\nsys.exit(1)\n")
        self.data_dir = root / f"{name}-data"
        env = {
            "CTXD_WATCH_ROOTS": json.dumps([str(root)]),
            "CTXD_RATE_PER_S": "1e9",  # the build posts faster than any rate limit allows
            "CTXD_RATE_BURST": "1000000000",
        }
        self.server: Server = start_server(self.data_dir, env=env)
        self.client = httpx.Client(base_url=self.server.url, timeout=120)
        self.sid = ""
        self.calls = 0
        self.runs = 0
        self.ingest: list[float] = []  # milliseconds per action, one figure per request
        self.sent_at = 0.0  # when the newest request of actions began (epoch seconds)

    def close(self) -> None:
        self.client.close()
        self.server.stop()

    def payload(self, event: str, **fields: object) -> dict[str, object]:
        return {"hook_event_name": event, "session_id": CONVERSATION, "transcript_path": "",
                "cwd": str(self.workspace), **fields}  # fmt: skip

    def hook(self, event: str, **fields: object) -> dict:
        return self.send(self.payload(event, **fields))

    def send(self, payload: dict[str, object]) -> dict:
        answer = self.client.post("/api/hooks/claude", json={"payload": payload})
        answer.raise_for_status()
        body: dict = answer.json()
        self.sid = body["session"]
        return body

    def bash(self, command: str) -> dict[str, object]:
        """The PostToolUse payload of one Bash call, as Claude Code sends it."""
        self.calls += 1
        return self.payload(
            "PostToolUse",
            tool_name="Bash",
            tool_use_id=f"toolu_{self.calls:06d}",
            tool_input={"command": command},
            tool_response={"stdout": "", "stderr": "", "interrupted": False},
        )

    def launch(self, run: int) -> dict[str, object]:
        """Run `run`'s log, written as the run left it, and the command that launched it."""
        (self.workspace / "logs" / f"run{run}.log").write_text(
            f"[run {run}] initialising 8 ranks\n"
            f"RuntimeError: NCCL error in run {run} (code {50 + run % 50})\n"
        )
        self.runs = run
        return self.bash(
            f"nohup python3 serve.py --run {run} --port {20000 + run} --nccl-algo v{run % 7}"
            f" > logs/run{run}.log 2>&1 &"
        )

    def events(self, launches: int, commands_per_launch: int) -> Iterator[dict[str, object]]:
        for run in range(1, launches + 1):
            if run % INSTRUCTION_EVERY == 0:
                prompt = f"Instruction {run // INSTRUCTION_EVERY}: try NCCL_ALGO variant {run}"
                yield self.payload("UserPromptSubmit", prompt=prompt)
            yield self.launch(run)
            for step in range(commands_per_launch):
                yield self.bash(f"tail -n {step + 1} logs/run{run}.log")

    def build(self, launches: int, commands_per_launch: int, batched: bool) -> float:
        """The session's history; seconds it took, its last settling snapshot stored."""
        started = time.perf_counter()
        self.hook("SessionStart", source="startup")
        self.hook("UserPromptSubmit", prompt=OBJECTIVE)
        pending: list[dict] = []
        for event in self.events(launches, commands_per_launch):
            if event["hook_event_name"] == "UserPromptSubmit":
                self.post(pending)
                self.settled()  # the person types: the launches before it settle
                self.send(event)
            elif not batched:
                self.timed(1, lambda event=event: self.send(event))  # type: ignore[misc]
            else:
                pending += from_claude(event)  # what the hook endpoint records for it
                if len(pending) == BATCH:
                    self.post(pending)
        self.post(pending)
        self.settled(quiet=True)
        return time.perf_counter() - started

    def post(self, actions: list[dict]) -> None:
        if actions:
            url = f"/api/sessions/{self.sid}/actions"
            body = {"actions": actions}
            self.timed(len(actions), lambda: self.client.post(url, json=body).raise_for_status())
            actions.clear()

    def timed(self, count: int, send: Callable[[], object]) -> None:
        """Sends a request of `count` actions; keeps the milliseconds per action."""
        self.sent_at = time.time()
        started = time.perf_counter()
        send()
        self.ingest.append((time.perf_counter() - started) * 1000 / count)

    def newest(self) -> tuple[int, float]:
        """The session's newest version and when it was taken or last confirmed (a snapshot
        that found nothing changed confirms the newest); 0, 0 before any."""
        versions = self.client.get(f"/api/sessions/{self.sid}/snapshots").json()  # newest first
        if not versions:
            return 0, 0.0
        stamps = [versions[0]["taken_at"], versions[0].get("confirmed_at") or ""]
        return versions[0]["version"], max(_epoch(s) for s in stamps if s)

    def settled(self, quiet: bool = False) -> None:
        """Waits for a snapshot taken after the newest request began (ctxd settles a second
        after the last launch); with `quiet`, also until no new one comes for 2 s, so that
        none runs beside a measured continue."""
        deadline = time.monotonic() + SETTLE_WAIT_S
        while self.newest()[1] <= self.sent_at:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no settling snapshot of {self.sid}")
            time.sleep(0.1)
        while quiet:
            newest = self.newest()
            time.sleep(2)
            quiet = self.newest() != newest

    def resume(self) -> tuple[float, str]:
        """Milliseconds of one "continue" through the hook endpoint, and the dump it gave."""
        started = time.perf_counter()
        context = self.hook("UserPromptSubmit", prompt="continue")["context"] or ""
        return (time.perf_counter() - started) * 1000, context

    def data_bytes(self) -> tuple[int, int]:
        """The data directory's database (with its WAL) and every other file in it."""
        files = [p for p in self.data_dir.rglob("*") if p.is_file()]
        db = sum(p.stat().st_size for p in files if p.name.startswith("ctxd.db"))
        return db, sum(p.stat().st_size for p in files) - db


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run(runs: int = 15, launches: int = LAUNCHES, hooks: bool = False) -> dict[str, float]:
    """Both sessions built, then their continues in turn; prints and returns the figures."""
    commands = launches * COMMANDS_PER_LAUNCH
    print(
        f"long session: continue after {launches:,} launches and {commands:,} commands,"
        f" next to a session of {SMALL_COMMANDS} commands"
    )
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-long-") as tmp:
        small = Session(Path(tmp), "small-hunt")
        try:
            big = Session(Path(tmp), "nccl-hunt")
            try:
                small.build(1, SMALL_COMMANDS - 1, batched=False)
                took = big.build(launches, COMMANDS_PER_LAUNCH, batched=not hooks)
                how = "one hook event each" if hooks else f"batches of {BATCH} actions"
                row("build of the long session", f"{took:.0f} s", f"({how})")
                tenth = max(1, len(big.ingest) // 10)
                first = statistics.median(big.ingest[:tenth])
                last = statistics.median(big.ingest[-tenth:])
                row("  recording, ms per action: first / last 10%", f"{first:.1f} / {last:.1f}")
                return {**measure(small, big, runs), "long_launches": launches}
            finally:
                big.close()
        finally:
            small.close()


def measure(small: Session, big: Session, runs: int) -> dict[str, float]:
    small.resume()  # unmeasured: each session's first continue fills its caches
    big.resume()
    small_ms: list[float] = []
    big_ms: list[float] = []
    small_dump = big_dump = ""
    for _ in range(runs):  # in turn, so both see the same load on a shared machine
        took, small_dump = small.resume()
        small_ms.append(took)
        took, big_dump = big.resume()
        big_ms.append(took)
    small_med, big_med = statistics.median(small_ms), statistics.median(big_ms)
    ratio = big_med / small_med
    db, files = big.data_bytes()
    small_total = sum(small.data_bytes()) / 2**20
    total = (db + files) / 2**20
    verdict = lambda met: "meets" if met else "misses"  # noqa: E731
    row(
        "continue, small session: median / p95",
        f"{small_med:.1f} ms",
        f"p95 {p95(small_ms):.1f} ms",
    )
    row("continue, long session: median / p95", f"{big_med:.1f} ms", f"p95 {p95(big_ms):.1f} ms")
    row("  aim: under 100 ms", f"{big_med:.1f} ms", verdict(big_med < AIM_MS))
    row("  ratio long / small (aim: <= 1.5)", f"{ratio:.2f}", verdict(ratio <= AIM_RATIO))
    row("dump handed back, chars: small / long", f"{len(small_dump)} / {len(big_dump)}")
    newest = f"NCCL error in run {big.runs} "
    row("  the long dump names the newest run's error", "yes" if newest in big_dump else "NO")
    row("data dir, small session: total", f"{small_total:.2f} MB")
    row("data dir, long session: database with WAL", f"{db / 2**20:.2f} MB")
    row("data dir, long session: other files", f"{files / 2**20:.2f} MB")
    row("  total (aim: under 50 MB)", f"{total:.2f} MB", verdict(total < AIM_MB))
    return {
        "long_continue_small_ms": small_med,
        "long_continue_ms": big_med,
        "long_continue_p95_ms": p95(big_ms),
        "long_continue_ratio": ratio,
        "long_data_mb": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--launches", type=int, default=LAUNCHES)
    parser.add_argument("--hooks", action="store_true", help="build event by event (slower)")
    args = parser.parse_args()
    figures = run(args.runs, args.launches, args.hooks)
    table.append_results({**figures, "runs": args.runs}, "long_session")


if __name__ == "__main__":
    main()
