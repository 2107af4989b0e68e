"""The dump files on disk: one Markdown file per version, `latest.md`, and the latest in memory."""

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from service.settings import Settings

if TYPE_CHECKING:  # render imports this module for DumpLocation: keep that light
    from service.store import Store


@dataclass(frozen=True)
class DumpLocation:
    """Where one dump lives, as its footer tells the reader: a file and two URLs."""

    markdown_path: str
    json_url: str
    resume_url: str


def version_file(version: int) -> str:
    return f"v{version:04d}.md"


class DumpFiles:
    """Writes and rebuilds the Markdown files; the database stays the truth they come from."""

    def __init__(self, settings: Settings, store: "Store") -> None:
        self.settings = settings
        self.store = store
        # The newest dump of each session, as written: resume reads it without any I/O.
        self._latest: dict[str, str] = {}

    def session_dir(self, sid: str) -> Path:
        return self.settings.data_dir / sid

    def locate(self, sid: str, version: int) -> DumpLocation:
        base = self.settings.base_url
        return DumpLocation(
            markdown_path=str((self.session_dir(sid) / version_file(version)).resolve()),
            json_url=f"{base}/api/sessions/{sid}/snapshots/{version}",
            resume_url=f"{base}/api/sessions/{sid}/resume",
        )

    def write(self, sid: str, version: int, markdown: str, *, latest: bool) -> None:
        folder = self.session_dir(sid)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / version_file(version), markdown)
        if latest:
            link_atomic(folder / version_file(version), folder / "latest.md")
            self._latest[sid] = markdown

    def remove(self, sid: str, version: int) -> None:
        (self.session_dir(sid) / version_file(version)).unlink(missing_ok=True)

    def latest_in_memory(self, sid: str) -> str | None:
        """The newest stored dump of a session, if written or checked since start-up."""
        return self._latest.get(sid)

    def markdown_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.settings.data_dir.glob("*/*.md") if p.is_file())

    def rebuild(self) -> int:
        """Rewrite any Markdown file missing on disk from the database (the truth)."""
        written = 0
        for sid, version, is_latest in self.store.iter_versions():
            folder = self.session_dir(sid)
            missing = not (folder / version_file(version)).exists()
            if not (missing or is_latest):
                continue
            markdown = self.store.get_markdown(sid, version)
            if is_latest:
                self._latest[sid] = markdown
            stale_latest = is_latest and _differs(folder / "latest.md", markdown)
            if missing or stale_latest:
                folder.mkdir(parents=True, exist_ok=True)
                if missing:
                    write_atomic(folder / version_file(version), markdown)
                if stale_latest:
                    link_atomic(folder / version_file(version), folder / "latest.md")
                written += 1
        return written


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
