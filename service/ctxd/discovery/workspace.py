"""The workspace of a cwd (its git top level, else the cwd), its git section, and secret paths.

git runs with a short timeout and GIT_OPTIONAL_LOCKS=0, so ctxd never takes the index lock
from under the agent's own git commands. Only names and metadata are read, never contents.
"""

import fnmatch
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import PurePosixPath

GIT_TIMEOUT_S = 2.0
DIRTY_MAX = 20
_SECRET_NAMES = (
    ".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "id_*", ".netrc", ".pgpass",
    ".git-credentials", "credentials.json", "*.keystore", ".htpasswd",
)  # fmt: skip
# Templates that hold no secret by convention.
_NOT_SECRET = (".env.example", ".env.sample", ".env.template", ".env.dist")
_SECRET_DIRS = (".ssh", ".gnupg", ".aws", ".kube", ".docker")


@dataclass
class GitSection:
    top: str
    branch: str | None  # None when detached
    head: str | None  # short sha; None in a repository without commits
    subject: str = ""
    dirty: list[str] = field(default_factory=list)  # at most DIRTY_MAX paths
    dirty_count: int = 0


def _git(cwd: str, *args: str, timeout: float) -> str | None:
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            ["git", "-C", cwd, *args],
            capture_output=True, timeout=timeout, check=False, env=env,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "replace")


def workspace_of(cwd: str, timeout: float = GIT_TIMEOUT_S) -> str:
    """The git top level holding cwd, else cwd itself (normalised, absolute)."""
    cwd = os.path.abspath(cwd)
    top = (_git(cwd, "rev-parse", "--show-toplevel", timeout=timeout) or "").strip()
    return top or cwd


def _parse_status(text: str) -> tuple[str | None, str | None, list[str]]:
    """(branch, full head sha, changed paths) from `git status --porcelain=v2 --branch -z`."""
    branch: str | None = None
    oid: str | None = None
    paths: list[str] = []
    records = text.split("\0")
    skip_next = False
    for record in records:
        if skip_next:  # the original path of a rename
            skip_next = False
            continue
        if record.startswith("# branch.oid "):
            value = record.split(" ", 2)[2]
            oid = None if value == "(initial)" else value
        elif record.startswith("# branch.head "):
            value = record.split(" ", 2)[2]
            branch = None if value == "(detached)" else value
        elif record.startswith("1 "):
            paths.append(record.split(" ", 8)[-1])
        elif record.startswith("2 "):
            paths.append(record.split(" ", 9)[-1])
            skip_next = True
        elif record.startswith("u "):
            paths.append(record.split(" ", 10)[-1])
        elif record.startswith("? "):
            paths.append(record[2:])
    return branch, oid, paths


def git_section(
    top: str, timeout: float = GIT_TIMEOUT_S, dirty_max: int = DIRTY_MAX
) -> GitSection | None:
    """Branch, HEAD (short sha and subject) and dirty files of a checkout; None if not git."""
    status = _git(top, "status", "--porcelain=v2", "--branch", "-z", timeout=timeout)
    if status is None:
        return None
    branch, oid, paths = _parse_status(status)
    section = GitSection(top=top, branch=branch, head=None, dirty=paths[:dirty_max])
    section.dirty_count = len(paths)
    if oid:
        line = _git(top, "log", "-1", "--format=%h%x00%s", timeout=timeout) or ""
        short, _, subject = line.rstrip("\n").partition("\0")
        section.head = short or oid[:7]
        section.subject = subject[:200]
    return section


def _secret_parts(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    if any(part in _SECRET_DIRS for part in parts[:-1]):
        return True
    if name in _NOT_SECRET:
        return False
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in _SECRET_NAMES)


def is_secret_path(path: str) -> bool:
    """True for a path ctxd must never watch or read: `.env`, keys, `~/.ssh/*` and the like,
    also when reached through a symlink."""
    if not isinstance(path, str) or not path:
        return False
    expanded = os.path.expanduser(path)
    if _secret_parts(expanded):
        return True
    try:
        real = os.path.realpath(expanded)
    except (OSError, ValueError):
        return True  # cannot tell where it leads: refuse
    return real != expanded and _secret_parts(real)
