"""Artifacts in words: a wheel or sdist from its file name, and what changed between two looks."""

import re

from ctxd.fmt import human_bytes
from ctxd.models import ArtifactInfo, DistInfo

_WHEEL = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?"
    r"-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)
_SDIST = re.compile(r"^(?P<name>.+?)-(?P<version>\d[^-]*)\.(?:tar\.gz|tar\.bz2|tar\.xz|zip)$")


def parse_dist(filename: str) -> DistInfo | None:
    """Name, version and tags of a wheel or sdist, from its file name alone."""
    m = _WHEEL.match(filename)
    if m:
        tags = [
            f"{py}-{abi}-{plat}"
            for py in m["py"].split(".")
            for abi in m["abi"].split(".")
            for plat in m["plat"].split(".")
        ]
        return DistInfo(
            kind="wheel", name=m["name"], version=m["version"], build=m["build"], tags=tags[:20]
        )
    m = _SDIST.match(filename)
    if m:
        return DistInfo(kind="sdist", name=m["name"], version=m["version"])
    return None


def describe_change(prev: ArtifactInfo | None, cur: ArtifactInfo | None) -> str | None:
    """A short text of what changed between two observations of one path, None if nothing."""
    if prev is None or cur is None:
        return None if prev is cur else ("new" if prev is None else "gone")
    if prev.type != cur.type:
        return f"was a {prev.type}, now a {cur.type}"
    parts = []
    if prev.size != cur.size:
        old, new = human_bytes(prev.size), human_bytes(cur.size)
        if old == new:
            old, new = f"{prev.size:,} B", f"{cur.size:,} B"
        parts.append(f"size {old} -> {new}")
    if cur.type == "directory":
        if cur.changes:
            parts.extend(cur.changes)
        elif prev.fingerprint != cur.fingerprint:
            parts.append("contents changed")
        return ", ".join(parts) or None
    pending = "pending" in (prev.fingerprint_kind, cur.fingerprint_kind)
    if prev.fingerprint != cur.fingerprint and not pending:
        parts.append("content changed")
    elif prev.modified_at != cur.modified_at:
        parts.append("rebuilt, same content" if not pending else "modified time changed")
    return ", ".join(parts) or None
