"""The dump files on disk: the newest versions' Markdown files, `latest.md`, the latest in memory.

A session folder keeps the files of its newest `markdown_files` versions (0: every version's);
an older file goes when a newer version is written. Every version stays readable as Markdown
from the database (the API, the HTML pages, the CLI): the files are a convenience, not a record.
"""

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ctxd.settings import Settings

if TYPE_CHECKING:  # render imports this module for DumpLocation: keep that light
    from ctxd.store.database import Store

log = logging.getLogger("ctxd")


@dataclass(frozen=True)
class DumpLocation:
    """Where one dump lives, as its footer tells the reader: a file and two URLs."""

    markdown_path: str
    json_url: str
    resume_url: str
    files_kept: int = 0  # the folder keeps the newest N versions' files; 0: every version's
    page_url: str = ""  # the session's page


def version_file(version: int) -> str:
    return f"v{version:04d}.md"


def _version_of(name: str) -> int | None:
    """The version a file name `v0042.md` is of; None for any other name."""
    stem = name[1:-3] if name.startswith("v") and name.endswith(".md") else ""
    return int(stem) if stem.isdigit() else None


class DumpFiles:
    """Writes and rebuilds the Markdown files; the database stays the truth they come from."""

    def __init__(self, settings: Settings, store: "Store") -> None:
        self.settings = settings
        self.store = store
        # The newest dump of each session, as committed: resume reads it without any I/O.
        self._latest: dict[str, str] = {}
        # Committed versions whose files could not be written yet, per session.
        self._behind: dict[str, set[int]] = {}
        self._guard = threading.Lock()
        self._blocked: set[str] = set()  # sessions whose latest.md is a directory, reported
        # The latest version each session's folder was trimmed for here (see `_trim_after`).
        self._trimmed: dict[str, int] = {}
        # Each session folder's real path, resolved once (a resolve costs a stat per part).
        self._real: dict[str, Path] = {}

    def session_dir(self, sid: str) -> Path:
        return self.settings.data_dir / sid

    def _real_dir(self, sid: str) -> Path:
        real = self._real.get(sid)
        if real is None:
            if len(self._real) > 4096:
                self._real.clear()
            real = self._real[sid] = self.session_dir(sid).resolve()
        return real

    def locate(self, sid: str, version: int) -> DumpLocation:
        base = self.settings.base_url
        return DumpLocation(
            markdown_path=str(self._real_dir(sid) / version_file(version)),
            json_url=f"{base}/api/sessions/{sid}/snapshots/{version}",
            resume_url=f"{base}/api/sessions/{sid}/resume",
            files_kept=self.settings.markdown_files,
            page_url=f"{base}/s/{sid}",
        )

    def write(self, sid: str, version: int, markdown: str, *, latest: bool) -> bool:
        """Write a committed version's files; False (logged, never raised) when they could not
        be: the commit is the truth, so the latest in memory follows it before any file
        does, and the files are written again on the next success or at start-up."""
        if latest:
            self._latest[sid] = markdown
        try:
            self._write(sid, version, markdown, latest=latest)
        except OSError as exc:
            with self._guard:
                self._behind.setdefault(sid, set()).add(version)
            log.warning(
                "session %s v%d is stored; its Markdown files could not be written (%s) and "
                "are rewritten from the database once they can be",
                sid,
                version,
                os.strerror(exc.errno) if exc.errno else type(exc).__name__,
            )
            return False
        self._catch_up(sid)
        return True

    def _write(self, sid: str, version: int, markdown: str, *, latest: bool) -> None:
        folder = self.session_dir(sid)
        # never the data directory itself: one removed under a running ctxd is not made again
        # with files and no database (the store refuses writes until a restart)
        folder.mkdir(exist_ok=True)
        if latest:
            write_atomic(folder / version_file(version), markdown)
            self._link_latest(sid, folder / version_file(version))
            self._trim_after(sid, version)
        elif self.in_window(version, self.store.latest_version(sid)):
            write_atomic(folder / version_file(version), markdown)

    def in_window(self, version: int, latest: int) -> bool:
        """Whether `version` is one of the newest whose files the folder keeps."""
        keep = self.settings.markdown_files
        return keep == 0 or version > latest - keep

    def trim(self, sid: str, latest: int) -> int:
        """Remove the files of versions older than the window; returns how many went. A file
        that cannot be removed stays for the next write or start-up to try again."""
        if self.settings.markdown_files == 0:
            return 0
        removed = 0
        for path in self.session_dir(sid).glob("v*.md"):
            version = _version_of(path.name)
            if version is None or self.in_window(version, latest):
                continue
            try:
                path.unlink()
            except OSError:  # gone meanwhile, or not removable now
                continue
            removed += 1
        return removed

    def _trim_after(self, sid: str, latest: int) -> None:
        """Remove the files that left the window since the last trim here: the whole folder
        is listed once per session and process (a glob costs more than the rest of a write),
        then only the versions that just fell out are removed."""
        keep, before = self.settings.markdown_files, self._trimmed.get(sid)
        if keep == 0 or before is None or not before < latest <= before + keep:
            self.trim(sid, latest)
        else:
            for version in range(before - keep + 1, latest - keep + 1):
                # absent already, or not removable now: the trim at start-up tries again
                with contextlib.suppress(OSError):
                    (self.session_dir(sid) / version_file(version)).unlink()
        self._trimmed[sid] = latest

    def _link_latest(self, sid: str, target: Path) -> None:
        """latest.md names `target`; a directory in its place is someone's, so it is left as
        it is and reported once (the versions and resume do not need it)."""
        link = target.with_name("latest.md")
        if link.is_dir() and not link.is_symlink():
            if sid not in self._blocked:
                self._blocked.add(sid)
                log.warning("%s is a directory: latest.md is not updated until it is moved", link)
            return
        self._blocked.discard(sid)
        link_atomic(target, link)

    def _catch_up(self, sid: str) -> None:
        """Write the files of earlier versions whose writing failed, now that one worked."""
        with self._guard:
            behind = self._behind.pop(sid, set())
        latest = self.store.latest_version(sid) if behind else 0
        for version in sorted(behind):
            if not self.in_window(version, latest):
                continue  # readable from the database; its file would go at once
            try:
                markdown = self.store.get_markdown(sid, version)
                folder = self.session_dir(sid)
                if not (folder / version_file(version)).exists():
                    write_atomic(folder / version_file(version), markdown)
            except Exception:  # pruned meanwhile, or the disk failed again: start-up rebuilds
                continue

    def files_behind(self, sid: str) -> list[int]:
        """Committed versions of `sid` whose Markdown files are not written yet."""
        with self._guard:
            return sorted(self._behind.get(sid, ()))

    def remove(self, sid: str, version: int) -> None:
        (self.session_dir(sid) / version_file(version)).unlink(missing_ok=True)

    def scrub(self, forms: list[str], replace: Callable[[str], str]) -> int:
        """The Markdown files (and the latest dumps held in memory) holding one of `forms`,
        rewritten with `replace`; how many files were."""
        with self._guard:
            for sid, text in list(self._latest.items()):
                if any(form in text for form in forms):
                    self._latest[sid] = replace(text)
        count = 0
        for path in self.settings.data_dir.glob("*/*.md"):
            try:
                if path.is_symlink() or not path.is_file():
                    continue  # latest.md links to a version's file, rewritten as itself
                text = path.read_text(encoding="utf-8")
                if any(form in text for form in forms):
                    write_atomic(path, replace(text))
                    count += 1
            except (OSError, ValueError) as exc:
                log.warning("could not rewrite %s without a learned secret: %s", path, exc)
        return count

    def latest_in_memory(self, sid: str) -> str | None:
        """The newest stored dump of a session, if written or checked since start-up."""
        return self._latest.get(sid)

    def markdown_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.settings.data_dir.glob("*/*.md") if p.is_file())

    def rebuild(self) -> int:
        """Rewrite any Markdown file of the window missing on disk from the database (the
        truth), and remove the files older than the window.

        A file that cannot be written (a read-only or full data directory) is logged once
        and left for the next start-up: the latest dump in memory is set all the same.
        """
        written, failed = 0, 0
        versions = list(self.store.iter_versions())
        latest = {sid: version for sid, version, is_latest in versions if is_latest}
        for sid, newest in latest.items():
            self.trim(sid, newest)
        for sid, version, is_latest in versions:
            if not self.in_window(version, latest[sid]):
                continue
            folder = self.session_dir(sid)
            path = folder / version_file(version)
            missing = not path.exists()
            if not (missing or is_latest):
                continue
            markdown = self.store.get_markdown(sid, version)
            if is_latest:
                self._latest[sid] = markdown
                # latest.md is a hard link to it: an edit in place changes both
                missing = missing or _differs(path, markdown)
            stale_latest = is_latest and (missing or _differs(folder / "latest.md", markdown))
            if not (missing or stale_latest):
                continue
            try:
                folder.mkdir(exist_ok=True)
                if missing:
                    write_atomic(folder / version_file(version), markdown)
                if stale_latest:
                    self._link_latest(sid, folder / version_file(version))
            except OSError:
                failed += 1
                continue
            written += 1
        if failed:
            log.warning("%d Markdown file(s) could not be rewritten from the database", failed)
        return written

    def clean_temps(self) -> int:
        """Remove temp files (`.v0001.md.PID.TID.tmp`) left by a process that was killed."""
        removed = 0
        for path in self.settings.data_dir.glob("*/.*.tmp"):
            parts = path.name.split(".")
            pid = int(parts[-3]) if len(parts) >= 4 and parts[-3].isdigit() else None
            if pid is None or (pid != os.getpid() and _alive(pid)):
                continue
            try:
                path.unlink()
                removed += 1
            except OSError:
                continue
        return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def write_atomic(path: Path, text: str) -> None:
    """Temp file in the same folder, fsync, rename: a reader sees the old file or the new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def link_atomic(target: Path, link: Path) -> None:
    """`link` becomes another name of `target`'s content, atomically: no second copy to sync."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        os.link(target, tmp)
        os.replace(tmp, link)
    except OSError:  # a filesystem without hard links gets a copy
        write_atomic(link, target.read_text(encoding="utf-8"))
    finally:
        tmp.unlink(missing_ok=True)


def _differs(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") != text
    except OSError:
        return True
