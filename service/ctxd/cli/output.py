"""What the CLI prints for a person: a table for each listing and one line for each change, from
the service's JSON (with `--json` the commands print that JSON instead)."""

import shutil
import sys
from datetime import UTC, datetime
from typing import Any

from ctxd import fmt

Row = list[str]


def table(header: Row, rows: list[Row]) -> str:
    """Aligned columns under a header; the last one is cut to the terminal's width on a
    terminal (piped, lines are whole: `grep` sees everything)."""
    cells = [[fmt.printable(c, lines=False) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    room = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    lines = []
    for row in cells:
        line = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False))
        line = f"{line}  {row[-1]}" if widths else row[-1]
        lines.append(_cut(line.rstrip(), room))
    return "\n".join(lines)


def _cut(line: str, room: int | None) -> str:
    return line if room is None or len(line) <= room else line[: max(room - 1, 1)] + "…"


def counted(number: int, thing: str) -> str:
    """ "1 signal", "3 signals"."""
    return f"{number} {thing}" if number == 1 else f"{number} {thing}s"


def first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] + (" …" if len(lines) > 1 else "") if lines else ""


def ago(stamp: str | None) -> str:
    """ "3 min ago" from the service's ISO time."""
    if not stamp:
        return "-"
    moment = datetime.fromisoformat(stamp)
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return f"{fmt.human_duration((datetime.now(UTC) - moment).total_seconds())} ago"


def sessions(found: list[dict[str, Any]]) -> str:
    if not found:
        return "no sessions yet: `ctxd session NAME` makes one (the hooks make them by themselves)"
    rows = [
        [s["id"], str(s["versions"]), ago(s["last_activity_at"]), _about(s), s.get("cwd") or ""]
        for s in found
    ]
    return table(["SESSION", "VERSIONS", "ACTIVE", "ABOUT", "DIRECTORY"], rows)


def _about(session: dict[str, Any]) -> str:
    return first_line(session.get("title") or session.get("objective")) or "-"


def watches(sid: str, found: list[dict[str, Any]]) -> str:
    if not found:
        return f"session {sid} watches nothing: `ctxd watch {sid} KIND TARGET` adds a watch"
    rows = [
        [
            str(w["id"]),
            fmt.watch_target(w["spec"]),
            _host(w["spec"]),
            ago(w["created_at"]),
            f"ctxd: {w['reason']}" if w.get("auto") else "you",
        ]
        for w in found
    ]
    return table(["ID", "WATCH", "HOST", "ADDED", "BY"], rows)


def _host(spec: dict[str, Any]) -> str:
    """The peer (or a port's address) a watch looks at; "" for this machine."""
    host = spec.get("host") or ""
    return "" if spec["kind"] == "port" and host == "127.0.0.1" else host


def journal(sid: str, entries: list[dict[str, Any]]) -> str:
    if not entries:
        return f"session {sid} has no journal entries: `ctxd note {sid} KIND TEXT` adds one"
    rows = [
        [str(e["id"]), e["kind"], e.get("status") or "", ago(e["created_at"]), _entry_text(e)]
        for e in entries
    ]
    return table(["ID", "KIND", "STATUS", "ADDED", "TEXT"], rows)


def _entry_text(entry: dict[str, Any]) -> str:
    text = first_line(entry["text"])
    text = f"{entry['key']} = {text}" if entry.get("key") else text
    return f"{text} → {first_line(entry['outcome'])}" if entry.get("outcome") else text


def snapshots(sid: str, found: list[dict[str, Any]]) -> str:
    if not found:
        return f"session {sid} has no snapshots yet: `ctxd snapshot {sid}` takes one"
    rows = [
        [
            f"v{s['version']}",
            ago(s["taken_at"]),
            s["trigger"],
            str(s["signals"]),
            str(s["changes"]),
        ]
        for s in found
    ]
    return table(["VERSION", "TAKEN", "TRIGGER", "SIGNALS", "CHANGES"], rows)


def snapshot_taken(snapshot: dict[str, Any]) -> str:
    header = snapshot["header"]
    signals = counted(len(snapshot["signals"]), "signal")
    return f"{header['session']} v{header['version']} ({signals})"


def scrubbed(result: dict[str, int]) -> str:
    if not result["values"]:
        return "nothing to scrub: every secret ctxd knows was scrubbed when it learned it"
    places = result["rows"] + result["blobs"] + result["dumps"]
    return (
        f"scrubbed {result['values']} secret value(s) from {places} stored place(s)"
        f" ({result['rows']} rows, {result['blobs']} sections, {result['dumps']} dumps)"
    )


def pruned(removed: int, keep_days: int | None) -> str:
    older = f"{keep_days} days" if keep_days else "the server's keep-days"
    return f"removed {counted(removed, 'version')} older than {older}"


def watched(watch: dict[str, Any], added: bool) -> str:
    said = "watching" if added else "already watching"
    where = f" on {host}" if (host := _host(watch["spec"])) else ""
    target = fmt.printable(fmt.watch_target(watch["spec"]), lines=False)
    return f"{said} {target}{where} in session {watch['session']} (watch {watch['id']})"


def noted(entry: dict[str, Any], verb: str) -> str:
    status = f", {entry['status']}" if entry.get("status") else ""
    text = fmt.printable(first_line(entry["text"]), lines=False)
    return (
        f"{verb} journal entry {entry['id']} ({entry['kind']}{status}) of session "
        f"{entry['session']}: {text}"
    )


def session_saved(session: dict[str, Any], created: bool, changed: list[str]) -> str:
    if created:
        return f"created session {session['id']}"
    if changed:
        return f"updated session {session['id']}: {', '.join(changed)}"
    return f"session {session['id']} exists; nothing to change"


def health(url: str, said: dict[str, Any]) -> str:
    size = fmt.human_bytes(said.get("data_dir_bytes"))
    return (
        f"ctxd {said.get('version', '?')} is up at {url}: storage {said.get('storage', '?')}, "
        f"data {size}"
    )


def actions(sid: str, done: str, result: dict[str, Any]) -> str:
    added = [f"{fmt.watch_target(w['spec'])} (watch {w['id']})" for w in result["watches"]]
    line = f"recorded {done} in session {sid}"
    return fmt.printable(f"{line}; now watching {', '.join(added)}" if added else line, False)


def search_hits(url: str, result: dict[str, Any], limit: int, offset: int) -> str:
    lines = []
    for hit in result["hits"]:
        where = f"v{hit['version']}" if hit["version"] else "before v1"
        at = (hit["at"] or "")[:19].replace("T", " ")
        lines.append(f"{hit['session']} {where} {at} [{hit['kind']}] {url}{hit['link']}")
        lines.append("    " + fmt.printable(" ".join(hit["snippet"].split()), lines=False))
    if not result["hits"]:
        lines.append("no hits")
    elif result["more"]:
        lines.append(f"more: --offset {offset + limit}")
    return "\n".join(lines)
