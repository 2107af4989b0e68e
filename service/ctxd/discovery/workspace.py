"""A workspace's git section, and which paths hold secrets.

git runs with a short timeout and GIT_OPTIONAL_LOCKS=0, so ctxd never takes the index lock
from under the agent's own git commands. Only names and metadata are read, never contents.
"""

import fnmatch
import functools
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import PurePosixPath

GIT_TIMEOUT_S = 2.0
DIRTY_MAX = 20
# A file with one of these names holds a secret wherever it lies (the last part of a path).
_SECRET_NAMES = (
    # environment files, keys and certificates
    ".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "*.ppk", "*.jks", "*.keystore",
    "*.kdbx", "id_*", "ssh_host_*", ".htpasswd",
    # credential files, however the tool is installed: git hosts, registries, clouds, Vault
    ".netrc", "_netrc", ".git-credentials", ".npmrc", ".yarnrc", ".yarnrc.yml", ".pypirc",
    "pip.conf", ".s3cfg", ".boto", ".databrickscfg", ".dockercfg", ".vault-token",
    ".terraformrc", "terraform.rc", "kubeconfig", "kubeconfig.*", "*.kubeconfig",
    "credentials", "credentials.*", ".credentials.json", "auth.json", "oauth_creds.json",
    "application_default_credentials.json", "kaggle.json", "rclone.conf", ".claude.json",
    "token", "*_token", ".*token", "*.token", "stored_tokens",  # ~/.ctxd_token among them
    # databases: passwords in files and in their clients' histories
    ".pgpass", ".pg_service.conf", ".my.cnf", ".mylogin.cnf", "debian.cnf", ".mongorc.js",
    ".mongoshrc.js", ".dbshell",
    # histories: shells (bash, zsh, fish, sh) and REPLs (python, psql, mysql, node, redis...)
    ".*history", "fish_history", "*_repl_history", ".histfile", "history.sqlite",
)  # fmt: skip
# Templates that hold no secret by convention.
_NOT_SECRET = (".env.example", ".env.sample", ".env.template", ".env.dist")
# Places (one or more parts in a row, anywhere in a path) holding credentials: the directory
# or file itself and everything under it.
_SECRET_PLACES = tuple(
    tuple(place.split("/"))
    for place in (
        ".ssh", ".gnupg", ".password-store", ".local/share/keyrings",
        ".aws", ".azure", ".config/gcloud", ".oci", ".kube", ".docker", ".config/containers",
        ".config/gh", ".config/glab-cli", ".config/hub", ".config/helm", ".config/doctl",
        ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials",
        ".terraform.d/credentials.tfrc.json", ".m2/settings.xml", ".m2/settings-security.xml",
        ".gradle/gradle.properties", ".cache/huggingface/token", ".huggingface/token",
        ".kaggle", ".mongodb/mongosh", ".local/share/fish/fish_history",
        ".claude/.credentials.json", ".codex/auth.json", ".gemini/oauth_creds.json",
        ".local/share/opencode/auth.json",
        "etc/shadow", "etc/gshadow", "etc/shadow-", "etc/gshadow-", "etc/security/opasswd",
        "etc/kubernetes/admin.conf", "etc/rancher/k3s/k3s.yaml",
    )
)  # fmt: skip
_MAGIC = re.compile(r"[*?[]")


@dataclass
class GitSection:
    top: str
    branch: str | None  # None when detached
    head: str | None  # short sha; None in a repository without commits
    subject: str = ""
    dirty: list[str] = field(default_factory=list)  # at most DIRTY_MAX paths
    dirty_count: int = 0
    untracked: set[str] = field(default_factory=set)  # those of `dirty` not in git at all
    lines: dict[str, str] = field(default_factory=dict)  # a tracked change's "+3 -1"


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


def _parse_status(text: str) -> tuple[str | None, str | None, list[str], set[str]]:
    """(branch, full head sha, changed paths, those of them untracked) from
    `git status --porcelain=v2 --branch -z`."""
    branch: str | None = None
    oid: str | None = None
    paths: list[str] = []
    untracked: set[str] = set()
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
            untracked.add(record[2:])
    return branch, oid, paths, untracked


def _numstat(text: str) -> dict[str, str]:
    """{path: "+3 -1"} from `git diff --numstat -z` ("-" for a binary file's counts)."""
    out = {}
    for record in text.split("\0"):
        added, _, rest = record.partition("\t")
        removed, _, path = rest.partition("\t")
        if path:
            out[path] = "binary" if added == "-" else f"+{added} -{removed}"
    return out


def git_section(
    top: str, timeout: float = GIT_TIMEOUT_S, dirty_max: int = DIRTY_MAX
) -> GitSection | None:
    """Branch, HEAD (short sha and subject) and dirty files of a checkout; None if not git."""
    status = _git(top, "status", "--porcelain=v2", "--branch", "-z", timeout=timeout)
    if status is None:
        return None
    branch, oid, paths, untracked = _parse_status(status)
    section = GitSection(top=top, branch=branch, head=None, dirty=paths[:dirty_max])
    section.dirty_count = len(paths)
    section.untracked = untracked & set(section.dirty)
    tracked = [p for p in section.dirty if p not in untracked]
    if oid and tracked:  # how much each change is: a one-line edit reads unlike a rewrite
        numstat = _git(top, "diff", "--numstat", "-z", "HEAD", "--", *tracked, timeout=timeout)
        section.lines = _numstat(numstat or "")
    if oid:
        line = _git(top, "log", "-1", "--format=%h%x00%s", timeout=timeout) or ""
        short, _, subject = line.rstrip("\n").partition("\0")
        section.head = short or oid[:7]
        section.subject = subject[:200]
    return section


def _sample(pattern: str) -> str:
    return pattern.replace("*", "x").replace("?", "x")


@functools.lru_cache(maxsize=65536)  # a path's parts repeat: /tmp, the project, logs
def _fits(part: str, pattern: str) -> bool:
    """Whether one path part may name what `pattern` names. A part that is itself a glob
    (`.np*`, `.*_history`) fits when one of them matches an example of the other (`.npmrc`,
    `.x_history`); hidden names only by a part that starts with a dot, as glob matches them."""
    if not _MAGIC.search(part):
        return fnmatch.fnmatchcase(part, pattern)
    if pattern.startswith(".") and not part.startswith("."):
        return False
    return fnmatch.fnmatchcase(_sample(pattern), part) or fnmatch.fnmatchcase(
        _sample(part), pattern
    )


def _secret_parts(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    for place in _SECRET_PLACES:
        width = len(place)
        for start in range(len(parts) - width + 1):
            if all(_fits(parts[start + i], place[i]) for i in range(width)):
                return True
    if name in _NOT_SECRET:
        return False
    return any(_fits(name, pattern) for pattern in _SECRET_NAMES)


def is_secret_path(path: str) -> bool:
    """True for a path ctxd must never watch or read: `.env`, keys, `~/.ssh/*`, the credential
    files and histories of common tools, also when reached through a symlink or matched by a
    glob."""
    if not isinstance(path, str) or not path:
        return False
    expanded = os.path.expanduser(path)
    if _secret_parts(expanded) or _secret_parts(os.path.normpath(expanded)):
        return True
    try:
        real = os.path.realpath(expanded)
    except (OSError, ValueError):
        return True  # cannot tell where it leads: refuse
    return real != expanded and _secret_parts(real)
