"""Build artifacts: size, modification time and a bounded-cost fingerprint of files and trees."""

import hashlib
import itertools
import os
import stat
from datetime import UTC, datetime

from service.collectors import CollectContext
from service.collectors.logs import explain_error, explain_mode, is_glob, match_glob
from service.models import ArtifactInfo, ArtifactsSection, ArtifactWatch, Unavailable, Watch
from service.settings import Limits

NAME = "artifacts"
MATCHES_MAX = 100
HEX_CHARS = 16

Entry = tuple[str, int, int]  # relative path (directories end in "/"), size, mtime_ns
CacheKey = tuple[str, int, int, int, int]  # path, inode, size, mtime_ns, ctime_ns


def read_exact(fd: int, size: int, offset: int) -> bytes:
    """`size` bytes at `offset`, fewer only at end of file."""
    parts = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def fingerprint_fd(fd: int, size: int, chunk: int) -> str:
    """Whole-content sha256 for small files; head, middle, tail and size for larger ones."""
    if size <= 3 * chunk:
        digest = hashlib.sha256(read_exact(fd, size, 0)).hexdigest()
        return f"sha256:{digest[:HEX_CHARS]}"
    hasher = hashlib.sha256()
    for offset in (0, (size - chunk) // 2, size - chunk):
        hasher.update(read_exact(fd, chunk, offset))
    hasher.update(size.to_bytes(8, "little"))
    return f"s3:{hasher.hexdigest()[:HEX_CHARS]}"


def fingerprint_file(path: str, chunk: int) -> tuple[os.stat_result, str]:
    """The file's stat and fingerprint; raises OSError, ValueError if it is not regular."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        reason = explain_mode(st.st_mode)
        if reason:
            raise ValueError(reason)
        return st, fingerprint_fd(fd, st.st_size, chunk)
    finally:
        os.close(fd)


def walk_tree(root: str, max_entries: int) -> tuple[list[Entry], bool]:
    """Entries under `root`, depth first in name order, without entering symlinked dirs.

    Returns (entries, truncated): the walk stops after `max_entries` entries. Symlinks to
    files are followed for size (model caches are trees of links to blobs).
    """
    entries: list[Entry] = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel_dir)) as it:
                batch = list(itertools.islice(it, max_entries - len(entries) + 1))
        except OSError:
            continue  # an unreadable subdirectory is skipped, not fatal
        batch.sort(key=lambda e: e.name)
        subdirs = []
        for entry in batch:
            if len(entries) >= max_entries:
                return entries, True
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    mtime = entry.stat(follow_symlinks=False).st_mtime_ns
                    entries.append((rel + "/", 0, mtime))
                    subdirs.append(rel)
                    continue
                try:
                    st = entry.stat()
                except OSError:
                    st = entry.stat(follow_symlinks=False)  # broken link: count the link
            except OSError:
                continue  # vanished during the walk
            size = st.st_size if stat.S_ISREG(st.st_mode) else 0
            entries.append((rel, size, st.st_mtime_ns))
        stack.extend(reversed(subdirs))
    return entries, False


def fingerprint_tree(entries: list[Entry]) -> str:
    """A hash of names, sizes and mtimes (not contents): cheap for a 500 GB model dir."""
    hasher = hashlib.sha256()
    for rel, size, mtime_ns in sorted(entries):
        hasher.update(f"{rel}\0{size}\0{mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return f"tree:{hasher.hexdigest()[:HEX_CHARS]}"


def to_datetime(mtime_ns: int) -> datetime:
    return datetime.fromtimestamp(mtime_ns / 1e9, UTC)


def observe_tree(watch_id: int, path: str, root_mtime_ns: int, limits: Limits) -> ArtifactInfo:
    entries, truncated = walk_tree(path, limits.artifact_entries_max)
    newest = max([root_mtime_ns, *(mtime for _, _, mtime in entries)])
    return ArtifactInfo(
        watch_id=watch_id,
        path=path,
        type="directory",
        size=sum(size for _, size, _ in entries),
        modified_at=to_datetime(newest),
        fingerprint=fingerprint_tree(entries),
        entries=len(entries),
        truncated=truncated,
    )


def observe_artifact(
    watch_id: int, path: str, limits: Limits, cache: dict[CacheKey, str], seen: dict[CacheKey, str]
) -> ArtifactInfo | Unavailable:
    """One file or directory; `cache` holds fingerprints of unchanged files from last time."""

    def unavailable(reason: str) -> Unavailable:
        return Unavailable(watch_id=watch_id, target=path, reason=reason)

    try:
        st = os.stat(path)
    except OSError as exc:
        return unavailable(explain_error(exc))
    path = os.path.realpath(path)
    if stat.S_ISDIR(st.st_mode):
        return observe_tree(watch_id, path, st.st_mtime_ns, limits)
    reason = explain_mode(st.st_mode)
    if reason:
        return unavailable(reason)  # never open a fifo or device: it could block or act
    # ctime cannot be set back by a tool, so an unchanged key means unchanged content.
    key = (path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    fingerprint = cache.get(key)
    if fingerprint is None:
        try:
            st, fingerprint = fingerprint_file(path, limits.fingerprint_chunk_bytes)
        except FileNotFoundError:
            return unavailable("vanished while reading")
        except OSError as exc:
            return unavailable(explain_error(exc))
        except ValueError as exc:
            return unavailable(str(exc))
        key = (path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    seen[key] = fingerprint
    return ArtifactInfo(
        watch_id=watch_id,
        path=path,
        type="file",
        size=st.st_size,
        modified_at=to_datetime(st.st_mtime_ns),
        fingerprint=fingerprint,
    )


def collect_watch(
    watch_id: int,
    spec: ArtifactWatch,
    limits: Limits,
    cache: dict[CacheKey, str],
    seen: dict[CacheKey, str],
) -> list[ArtifactInfo | Unavailable]:
    """Observations for one artifact watch: its path, or the newest matches of its glob."""
    target = os.path.expanduser(spec.path)
    if not is_glob(target):
        return [observe_artifact(watch_id, target, limits, cache, seen)]
    matches = match_glob(target)
    if not matches:
        return [Unavailable(watch_id=watch_id, target=target, reason="no file matches the glob")]
    results = [observe_artifact(watch_id, p, limits, cache, seen) for p, _ in matches[:MATCHES_MAX]]
    if len(matches) > MATCHES_MAX:
        reason = f"more than {MATCHES_MAX} matches; showing the newest {MATCHES_MAX}"
        results.append(Unavailable(watch_id=watch_id, target=target, reason=reason))
    return results


def collect(watches: list[Watch], ctx: CollectContext) -> ArtifactsSection:
    """Observe every artifact watch of the session; failures are listed, never raised."""
    section = ArtifactsSection()
    cache: dict[CacheKey, str] = ctx.memory.get(NAME, {}).get("fingerprints", {})
    seen: dict[CacheKey, str] = {}
    for watch in watches:
        if not isinstance(watch.spec, ArtifactWatch):
            continue
        try:
            results = collect_watch(watch.id, watch.spec, ctx.settings.limits, cache, seen)
        except Exception as exc:  # a bad watch must not cost the rest of the dump
            results = [
                Unavailable(watch_id=watch.id, target=watch.spec.path, reason=f"error: {exc!r}")
            ]
        for result in results:
            if isinstance(result, ArtifactInfo):
                section.items.append(result)
            else:
                section.unavailable.append(result)
    ctx.memory[NAME] = {"fingerprints": seen}  # only current files: the cache stays bounded
    return section


def format_size(size: int) -> str:
    """Decimal units, as `ls -h --si` and download pages show them: 12 MB, 1.5 GB."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            break
        value /= 1000
    if unit == "B":
        return f"{size} B"
    return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"


def describe_change(prev: ArtifactInfo | None, cur: ArtifactInfo | None) -> str | None:
    """A short text of what changed between two observations of one path, None if nothing."""
    if prev is None or cur is None:
        return None if prev is cur else ("new" if prev is None else "gone")
    if prev.type != cur.type:
        return f"was a {prev.type}, now a {cur.type}"
    parts = []
    if prev.size != cur.size:
        old, new = format_size(prev.size), format_size(cur.size)
        if old == new:
            old, new = f"{prev.size:,} B", f"{cur.size:,} B"
        parts.append(f"size {old} -> {new}")
    if cur.type == "directory" and prev.entries != cur.entries:
        parts.append(f"entries {prev.entries} -> {cur.entries}")
    if prev.fingerprint != cur.fingerprint:
        parts.append("contents changed" if cur.type == "directory" else "content changed")
    elif prev.modified_at != cur.modified_at:
        parts.append("modified time changed, content same")
    return ", ".join(parts) or None
