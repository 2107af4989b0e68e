"""File fingerprints (full SHA-256 or sampled), their cache by identity, and bounded tree walks."""

import hashlib
import itertools
import os
import stat
import struct
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ctxd.collectors._fs import (
    NotRegular,
    open_confined,
    open_dir_confined,
    read_exact,
    stat_confined,
)

HEX_CHARS = 16
SAMPLES = 5
READ_BYTES = 1 << 20

# dev, inode, size, mtime_ns, ctime_ns: ctime cannot be set back by a tool, so an unchanged
# key means unchanged content without reading a byte. Packed in an interned string: every
# session (and each purpose) that watches a tree keeps its keys, and a tuple of five big
# ints costs ~240 bytes where this costs ~90, shared.
CacheKey = str
_KEY = struct.Struct("=QQqqq")


@dataclass
class Budget:
    """Bytes of content that may still be read in this collection."""

    left: int
    read: int = 0
    opened: int = 0


@dataclass
class FileEntry:
    rel: str  # relative path; directories end in "/"
    size: int
    mtime_ns: int
    key: CacheKey | None  # None for directories and what is not a regular file


def cache_key(st: os.stat_result) -> CacheKey:
    packed = _KEY.pack(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return sys.intern(packed.decode("latin-1"))


def fingerprint_fd(fd: int, size: int, full_max: int, chunk: int) -> tuple[str, int]:
    """("sha256:…" of the whole file, or "sampled:…" of size and a few chunks), bytes read."""
    hasher = hashlib.sha256()
    if size <= full_max:
        offset = 0
        while True:
            data = os.pread(fd, READ_BYTES, offset)
            if not data:
                break
            hasher.update(data)
            offset += len(data)
        return f"sha256:{hasher.hexdigest()[:HEX_CHARS]}", offset
    hasher.update(size.to_bytes(8, "little"))
    read = 0
    for i in range(SAMPLES):
        data = read_exact(fd, chunk, (size - chunk) * i // (SAMPLES - 1))
        hasher.update(data)
        read += len(data)
    return f"sampled:{hasher.hexdigest()[:HEX_CHARS]}", read


def kind_of(fingerprint: str) -> str:
    return fingerprint.split(":", 1)[0]


def fingerprint_path(
    path: str,
    cache: dict[CacheKey, str],
    seen: dict[CacheKey, str],
    budget: Budget,
    limits,
    roots: Iterable[Path] = (),
    known: os.stat_result | None = None,
) -> tuple[os.stat_result, str]:
    """Stat and fingerprint of one file, from the cache when its identity is unchanged.

    Raises OSError or NotRegular (Outside for a file beyond `roots`, judged on what is
    opened). When the budget is spent the fingerprint is "pending" (not cached), and the
    next collection continues where this one stopped. `known` is the path's stat, already
    verified by the caller; without it an lstat only serves the cache lookup, and what is
    returned comes from the opened, verified descriptor.
    """
    st = known if known is not None else os.stat(path, follow_symlinks=False)
    cached = cache.get(cache_key(st)) if stat.S_ISREG(st.st_mode) else None
    if cached is not None:
        seen[cache_key(st)] = cached
        return st, cached
    full_max = limits.fingerprint_full_bytes_max
    cost = st.st_size if st.st_size <= full_max else SAMPLES * limits.fingerprint_chunk_bytes
    if stat.S_ISREG(st.st_mode) and cost > budget.left and budget.opened:
        return st, "pending:"
    fd, st = open_confined(path, roots)
    try:
        fingerprint, read = fingerprint_fd(fd, st.st_size, full_max, limits.fingerprint_chunk_bytes)
    finally:
        os.close(fd)
    budget.left -= read
    budget.read += read
    budget.opened += 1
    # interned: the sessions watching one tree share each fingerprint
    seen[cache_key(st)] = fingerprint = sys.intern(fingerprint)
    return st, fingerprint


def fingerprint_entry(
    root: str,
    entry: FileEntry,
    cache: dict,
    seen: dict,
    budget: Budget,
    limits,
    roots: Iterable[Path] = (),
) -> str:
    """The fingerprint of a walked file: cached, computed, "pending:", or "error:<reason>"."""
    if entry.key is None:
        return ""
    if entry.key in cache:
        seen[entry.key] = cache[entry.key]
        return cache[entry.key]
    try:
        path = os.path.join(root, entry.rel)
        return fingerprint_path(path, cache, seen, budget, limits, roots)[1]
    except (OSError, NotRegular) as exc:
        return f"error:{type(exc).__name__}"


def _entry_stat(folder: str, entry: os.DirEntry, roots: Iterable[Path]) -> os.stat_result:
    """The entry's own stat; for a link to a file under the roots, its target's (model
    caches are trees of links to blobs). A link out of the roots, or a broken one, counts as
    the link itself: its target's size and time are never seen."""
    own = entry.stat(follow_symlinks=False)
    if not stat.S_ISLNK(own.st_mode):
        return own
    try:
        return stat_confined(os.path.join(folder, entry.name), roots)[0]
    except (OSError, NotRegular):
        return own


def _list(
    fd: int, folder: str, rel_dir: str, room: int, roots: tuple[Path, ...]
) -> tuple[list[tuple[FileEntry, bool]], bool]:
    """One directory's entries in name order (is_dir marks those to enter); (…, truncated)."""
    try:
        with os.scandir(fd) as it:
            batch = list(itertools.islice(it, room + 1))
    except OSError:
        return [], False
    batch.sort(key=lambda e: e.name)
    found: list[tuple[FileEntry, bool]] = []
    for entry in batch:
        if len(found) >= room:
            return found, True
        # interned: every memory that walks the tree keeps its paths (one copy, shared)
        rel = sys.intern(f"{rel_dir}/{entry.name}" if rel_dir else entry.name)
        try:
            st = _entry_stat(folder, entry, roots)
        except OSError:
            continue  # vanished during the walk
        if stat.S_ISDIR(st.st_mode) and not entry.is_symlink():
            found.append((FileEntry(rel + "/", 0, st.st_mtime_ns, None), True))
            continue
        regular = stat.S_ISREG(st.st_mode)
        key = cache_key(st) if regular else None
        found.append((FileEntry(rel, st.st_size if regular else 0, st.st_mtime_ns, key), False))
    return found, False


def walk_tree(
    root: str, max_entries: int, roots: Iterable[Path] = ()
) -> tuple[list[FileEntry], bool, int]:
    """Entries under `root`, depth first in name order, without entering symlinked dirs.

    Returns (entries, truncated, directories). Each directory is listed through a descriptor
    verified to lie under `roots`, so a directory swapped for a link mid-walk is not listed.
    """
    bases = tuple(roots)
    entries: list[FileEntry] = []
    stack, dirs = [""], 0
    while stack:
        rel_dir = stack.pop()
        dirs += 1
        folder = os.path.join(root, rel_dir)
        try:
            fd = open_dir_confined(folder, bases)
        except (OSError, NotRegular):
            continue  # an unreadable subdirectory is skipped, not fatal
        try:  # the entries stat through `fd`: it stays open until they are read
            found, truncated = _list(fd, folder, rel_dir, max_entries - len(entries), bases)
        finally:
            os.close(fd)
        entries.extend(e for e, _ in found)
        subdirs = [e.rel.rstrip("/") for e, is_dir in found if is_dir]
        if truncated:
            return entries, True, dirs
        stack.extend(reversed(subdirs))
    return entries, False, dirs


def fingerprint_tree(parts: list[tuple[str, int, str]]) -> str:
    """A hash of names, sizes and file fingerprints: the same content gives the same hash."""
    hasher = hashlib.sha256()
    for rel, size, fingerprint in sorted(parts):
        hasher.update(f"{rel}\0{size}\0{fingerprint}\n".encode("utf-8", "surrogateescape"))
    return f"tree:{hasher.hexdigest()[:HEX_CHARS]}"
