"""The issue-16 table: each figure of a run next to its target, and one line per run in
bench/results.jsonl (date, commit, figures), so that a regression shows in review."""

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results.jsonl"

# (figure key, label, target text, test of the figure against the target or None)
TARGETS: list[tuple[str, str, str]] = [
    ("snapshot_ms", "standard scenario snapshot, median", "<= 20 ms"),
    ("snapshot_p95_ms", "  p95", "<= 1.5 x median"),
    ("snapshot_ratio", "  ratio to the shell (same run)", "<= 0.25"),
    ("watch300_ms", "a watch matching 300 processes", "<= 60 ms"),
    ("host5000_ms", "5,000 host processes", "<= 30 ms"),
    ("discovery5000_ms", "  with discovery on: settling scan + snapshot", "<= 30 ms"),
    ("storage1000_mb", "1,000 versions, one new log line each", "<= 2.5 MB"),
    ("storage_readable", "  every version readable as Markdown", "all"),
    ("idle10x8_cpu_pct", "idle CPU, 10 sessions x 8 watches", "<= 0.5 %"),
    ("peak_rss_mb", "peak RSS with MCP in use", "<= 100 MB"),
    ("resume_rps", "resume of the latest dump, 16 connections", ">= 5,000 req/s"),
]


def _meets(key: str, figures: dict) -> str:
    value = figures.get(key)
    if value is None:
        return "not measured"
    limits = {
        "snapshot_ms": 20,
        "snapshot_ratio": 0.25,
        "watch300_ms": 60,
        "host5000_ms": 30,
        "discovery5000_ms": 30,
        "storage1000_mb": 2.5,
        "idle10x8_cpu_pct": 0.5,
        "peak_rss_mb": 100,
    }
    if key in limits:
        return "meets" if value <= limits[key] else "misses"
    if key == "snapshot_p95_ms":
        return "meets" if value <= 1.5 * figures["snapshot_ms"] else "misses"
    if key == "resume_rps":
        return "meets" if value >= 5000 else "misses"
    if key == "storage_readable":
        return "meets" if value == "all" else "misses"
    return ""


def _show(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    return "-" if value is None else str(value)


def print_table(figures: dict) -> None:
    print("\nissue 16: figures of this run next to their targets (medians; same-run shell)")
    print(f"  {'figure':<50} {'this run':>12}  {'target':<16} verdict")
    for key, label, target in TARGETS:
        value = _show(figures.get(key))
        print(f"  {label:<50} {value:>12}  {target:<16} {_meets(key, figures)}")
    for note in figures.get("notes", []):
        print(f"  note: {note}")


def _git(*args: str) -> str:
    run = subprocess.run(["git", *args], capture_output=True, text=True, cwd=RESULTS.parent)
    return run.stdout.strip()


def append_results(figures: dict, mode: str) -> None:
    """One JSON line per run: when, which commit (and whether the tree was dirty), figures."""
    line = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "mode": mode,
        "figures": figures,
    }
    with RESULTS.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, sort_keys=True) + "\n")
    print(f"appended to bench/{RESULTS.name}")
