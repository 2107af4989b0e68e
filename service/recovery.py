"""What an agent calls after losing context: resume dumps, diffs, and the continue message."""

import difflib

from service import changes, render
from service.models import Diff
from service.snapshots import Snapshotter


def resume(
    snap: Snapshotter,
    sid: str,
    *,
    fresh: bool = True,
    max_chars: int | None = None,
    since: int | None = None,
) -> str:
    """The dump an agent reads to pick up where it was: fresh (stored as a new version) or the
    latest stored one, optionally stressing what changed since version `since`, cut to fit."""
    snap.store.touch(sid)
    if fresh or snap.store.latest_version(sid) == 0:
        version = snap.take(sid, trigger="resume").header.version
    else:
        version = snap.store.latest_version(sid)
    markdown = snap.store.get_markdown(sid, version)
    if since is not None and since != version:
        markdown = _stress_since(snap, sid, since, version, markdown)
    return render.fit(markdown, max_chars)


def _stress_since(snap: Snapshotter, sid: str, since: int, version: int, markdown: str) -> str:
    items = changes.compare(
        snap.store.get_snapshot(sid, since), snap.store.get_snapshot(sid, version)
    )
    lines = [f"## Changes since v{since} (you asked)", ""]
    lines += [f"- {render.cell(c.text)}" for c in items] or ["- nothing changed"]
    title, _, rest = markdown.partition("\n## ")
    return f"{title}\n" + "\n".join(lines) + "\n\n## " + rest


def message(snap: Snapshotter, sid: str, text: str) -> str | None:
    """Any message is activity; an empty or blank one means "continue": returns a fresh dump."""
    if text.strip():
        snap.store.touch(sid, message=text)
        return None
    snap.store.touch(sid)
    version = snap.take(sid, trigger="continue").header.version
    return snap.store.get_markdown(sid, version)


def diff(snap: Snapshotter, sid: str, from_version: int, to_version: int) -> Diff:
    before = snap.store.get_snapshot(sid, from_version)
    after = snap.store.get_snapshot(sid, to_version)
    lines = difflib.unified_diff(
        snap.store.get_markdown(sid, from_version).splitlines(),
        snap.store.get_markdown(sid, to_version).splitlines(),
        fromfile=f"v{from_version}",
        tofile=f"v{to_version}",
        lineterm="",
    )
    return Diff(
        session=sid,
        from_version=from_version,
        to_version=to_version,
        changes=changes.compare(before, after),
        markdown_diff="\n".join(lines),
    )
