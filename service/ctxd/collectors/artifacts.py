"""Build artifacts: size, mtime and fingerprint of files, trees and globs, and what changed."""

import os
import stat
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ctxd import confine
from ctxd.collectors import CollectContext, per_watch
from ctxd.collectors._artifact_text import parse_dist
from ctxd.collectors._fingerprint import (
    Budget,
    CacheKey,
    FileEntry,
    fingerprint_entry,
    fingerprint_path,
    fingerprint_tree,
    kind_of,
    walk_tree,
)
from ctxd.collectors._fs import (
    NotRegular,
    explain_error,
    explain_mode,
    is_glob,
    match_glob,
    stat_confined,
)
from ctxd.collectors._holders import attach_users
from ctxd.collectors._tree_events import TreeWatcher
from ctxd.models import (
    ArtifactFile,
    ArtifactInfo,
    ArtifactsSection,
    ArtifactWatch,
    Unavailable,
    Watch,
)
from ctxd.settings import Limits

NAME = "artifacts"
SECTION = ArtifactsSection
KIND = "artifact"
RETIRES = True
MATCHES_MAX = 100
SUMMARY_FILES = 3
CHANGES_SHOWN = 20
WATCH_DIRS_MAX = 2000  # inotify needs one watch per directory: huge trees are walked instead
# Asking the watcher costs about 2 ms: any walk slower than that is worth replacing.
WATCH_WORTH_S = 0.005


def to_datetime(mtime_ns: int) -> datetime:
    return datetime.fromtimestamp(mtime_ns / 1e9, UTC)


def observe_file(
    watch_id: int, path: str, st: os.stat_result, limits: Limits, state: "_Walk"
) -> ArtifactInfo | Unavailable:
    """One regular file whose stat `st` was taken through a verified descriptor."""
    try:
        st, fingerprint = fingerprint_path(
            path, state.cache, state.seen, state.budget, limits, state.roots, known=st
        )
    except FileNotFoundError:
        return Unavailable(watch_id=watch_id, target=path, reason="vanished while reading")
    except NotRegular as exc:
        return Unavailable(watch_id=watch_id, target=path, reason=str(exc))
    except OSError as exc:
        return Unavailable(watch_id=watch_id, target=path, reason=explain_error(exc))
    return ArtifactInfo(
        watch_id=watch_id,
        path=path,
        type="file",
        size=st.st_size,
        modified_at=to_datetime(st.st_mtime_ns),
        fingerprint=fingerprint,
        fingerprint_kind=kind_of(fingerprint),
        dist=parse_dist(os.path.basename(path)),
    )


def tree_changes(old: dict, new: dict, truncated: bool) -> list[str]:
    """Per-file changes between two walks: added, removed, modified, rebuilt with same content."""
    lines = []
    for rel in sorted(new.keys() | old.keys()):
        if rel not in old:
            lines.append(f"added {rel}")
        elif rel not in new:
            if not truncated:  # past the entry bound is not gone
                lines.append(f"removed {rel}")
        else:
            (size0, mtime0, fp0), (size1, mtime1, fp1) = old[rel], new[rel]
            pending = "pending" in (kind_of(fp0), kind_of(fp1))
            if size0 != size1 or (fp0 != fp1 and not pending):
                lines.append(f"modified {rel}")
            elif mtime0 != mtime1:
                lines.append(f"rebuilt, same content: {rel}" if not pending else f"touched {rel}")
    if len(lines) > CHANGES_SHOWN:
        lines = [*lines[:CHANGES_SHOWN], f"… and {len(lines) - CHANGES_SHOWN} more"]
    return lines


@dataclass
class TreeMemo:
    """One watched directory as the previous collection left it."""

    watcher: TreeWatcher | None = None
    generation: int | None = None  # the watcher's, settled before the last walk
    info: ArtifactInfo | None = None
    files: dict[str, tuple[int, int, str]] | None = None  # rel -> (size, mtime_ns, fingerprint)
    keys: dict[CacheKey, str] = field(default_factory=dict)


@dataclass
class ArtifactsMemory:
    """What the artifacts collector keeps between snapshots."""

    fingerprints: dict[CacheKey, str] = field(default_factory=dict)  # only current files
    trees: dict[tuple[int, str], TreeMemo] = field(default_factory=dict)
    last_read_bytes: int = 0
    last_opened_files: int = 0


@dataclass
class _Walk:
    """What one collect() shares across watches."""

    cache: dict[CacheKey, str]
    budget: Budget
    trees: dict[tuple[int, str], TreeMemo]
    roots: tuple[Path, ...]
    probe: bool = False  # an event probe: a tree's stat says whether it changed (`_glance`)
    seen: dict[CacheKey, str] = field(default_factory=dict)
    kept_trees: dict[tuple[int, str], TreeMemo] = field(default_factory=dict)


def observe_tree(
    watch_id: int, root: str, root_st: os.stat_result, limits: Limits, memo: TreeMemo, walk: _Walk
) -> ArtifactInfo:
    """Walk, fingerprint and summarise a directory; `memo` is this tree's state from last time."""
    watcher = memo.watcher
    known = memo.generation if memo.info is not None else None
    if watcher is not None and known is not None and watcher.settled_generation() == known:
        assert memo.info is not None
        memo.info = memo.info.model_copy(update={"changes": []})  # nothing changed: no walk
        walk.seen.update(memo.keys)
        return memo.info
    # settled before the walk: an event during the walk makes the next collection walk again
    generation = watcher.settled_generation() if watcher is not None else None
    started = time.perf_counter()
    entries, truncated, dirs = walk_tree(root, limits.artifact_entries_max, walk.roots)
    walk_s = time.perf_counter() - started
    if watcher is None and not truncated and dirs <= WATCH_DIRS_MAX and walk_s >= WATCH_WORTH_S:
        memo.watcher = TreeWatcher(root)  # from the next collection on, walks are skipped
    if walk.probe:
        memo.files, memo.keys, memo.generation = None, {}, generation
        memo.info = _glance(watch_id, root, root_st, entries, truncated)
        return memo.info
    cache, seen, budget = walk.cache, walk.seen, walk.budget
    files: dict[str, tuple[int, int, str]] = {}
    parts = []
    for entry in entries:
        fingerprint = fingerprint_entry(root, entry, cache, seen, budget, limits, walk.roots)
        parts.append((entry.rel, entry.size, fingerprint))
        if entry.key is not None:
            files[entry.rel] = (entry.size, entry.mtime_ns, fingerprint)
    regular = [e for e in entries if e.key is not None]
    pending = any(kind_of(fp) == "pending" for _, _, fp in files.values())
    tree = fingerprint_tree(parts)
    newest = max([root_st.st_mtime_ns, *(e.mtime_ns for e in entries)])
    previous = memo.files
    info = ArtifactInfo(
        watch_id=watch_id,
        path=root,
        type="directory",
        size=sum(e.size for e in entries),
        modified_at=to_datetime(newest),
        fingerprint=tree.replace("tree:", "pending:") if pending else tree,
        fingerprint_kind="pending" if pending else "tree",
        entries=len(entries),
        truncated=truncated,
        files=len(regular),
        newest=summary(sorted(regular, key=lambda e: e.mtime_ns, reverse=True)),
        largest=summary(sorted(regular, key=lambda e: e.size, reverse=True)),
        changes=tree_changes(previous, files, truncated) if previous is not None else [],
    )
    memo.files, memo.info, memo.generation = files, info, generation
    memo.keys = {e.key: files[e.rel][2] for e in regular if e.key is not None}
    return info


def _glance(
    watch_id: int, root: str, root_st: os.stat_result, entries: list[FileEntry], truncated: bool
) -> ArtifactInfo:
    """A tree as an event probe sees it: whether it changed is all a probe asks, and each
    file's stat (inode, size, times) tells without reading it. Nothing per file is kept: the
    probe memory of a 5,000-file tree held megabytes, and its first walk read every file."""
    return ArtifactInfo(
        watch_id=watch_id, path=root, type="directory", size=sum(e.size for e in entries),
        modified_at=to_datetime(max([root_st.st_mtime_ns, *(e.mtime_ns for e in entries)])),
        fingerprint=fingerprint_tree([(e.rel, e.size, e.key or "") for e in entries]),
        fingerprint_kind="tree", entries=len(entries), truncated=truncated,
        files=sum(e.key is not None for e in entries),
    )  # fmt: skip


def summary(entries: list[FileEntry]) -> list[ArtifactFile]:
    return [
        ArtifactFile(path=e.rel, size=e.size, modified_at=to_datetime(e.mtime_ns))
        for e in entries[:SUMMARY_FILES]
    ]


def observe_artifact(
    watch_id: int, path: str, limits: Limits, state: _Walk
) -> ArtifactInfo | Unavailable:
    """One file or directory; failures become an Unavailable with a reason."""
    try:
        # checked at every look, on what is opened: a glob match or a symlink can point
        # outside later, or flip while it is looked at
        st, real = stat_confined(path, state.roots)
    except NotRegular as exc:
        return Unavailable(watch_id=watch_id, target=path, reason=str(exc))
    except OSError as exc:
        return Unavailable(watch_id=watch_id, target=path, reason=explain_error(exc))
    if stat.S_ISDIR(st.st_mode):
        memo = state.trees.get((watch_id, real)) or TreeMemo()
        state.kept_trees[(watch_id, real)] = memo
        return observe_tree(watch_id, real, st, limits, memo, state)
    reason = explain_mode(st.st_mode)
    if reason:
        return Unavailable(watch_id=watch_id, target=path, reason=reason)  # never open a fifo
    return observe_file(watch_id, real, st, limits, state)


def collect_watch(
    watch_id: int, spec: ArtifactWatch, limits: Limits, state: _Walk
) -> list[ArtifactInfo | Unavailable]:
    """Observations for one artifact watch: its path, or the newest matches of its glob."""
    target = os.path.expanduser(spec.path)
    if not is_glob(target):
        return [observe_artifact(watch_id, target, limits, state)]
    matches = match_glob(target)
    if not matches:
        return [Unavailable(watch_id=watch_id, target=target, reason="no file matches the glob")]
    results = [observe_artifact(watch_id, p, limits, state) for p, _ in matches[:MATCHES_MAX]]
    if len(matches) > MATCHES_MAX:
        reason = f"more than {MATCHES_MAX} matches; showing the newest {MATCHES_MAX}"
        results.append(Unavailable(watch_id=watch_id, target=target, reason=reason))
    return results


def collect(watches: list[Watch], ctx: CollectContext) -> ArtifactsSection:
    """Observe every artifact watch of the session; failures are listed, never raised."""
    memory = ctx.memory_of(NAME, ArtifactsMemory)
    limits = ctx.settings.limits
    state = _Walk(
        cache=memory.fingerprints,
        budget=Budget(limits.fingerprint_budget_bytes),
        trees=memory.trees,
        roots=confine.roots_of_run(ctx),
        probe=ctx.probe,
    )

    def observe(watch: Watch) -> list[ArtifactInfo | Unavailable]:
        assert isinstance(watch.spec, ArtifactWatch)
        return collect_watch(watch.id, watch.spec, limits, state)

    items, unavailable = per_watch(watches, ArtifactWatch, observe, _target)
    if not ctx.probe:  # a probe looks for changes; who uses an artifact is for the dump
        try:
            attach_users([i for i in items if isinstance(i, ArtifactInfo)], watches, ctx)
        except OSError as exc:
            unavailable.append(Unavailable(target="artifact users", reason=explain_error(exc)))
    for key, memo in state.trees.items():
        if key not in state.kept_trees and memo.watcher is not None:
            memo.watcher.stop()  # the watch is gone: so is its watcher thread
    memory.fingerprints = state.seen  # only current files: the cache stays bounded
    memory.trees = state.kept_trees
    memory.last_read_bytes, memory.last_opened_files = state.budget.read, state.budget.opened
    return ArtifactsSection(items=items, unavailable=unavailable)


def _target(watch: Watch) -> str:
    return watch.spec.path if isinstance(watch.spec, ArtifactWatch) else NAME
