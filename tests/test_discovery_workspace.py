"""The workspace and git section of a real repository, and which paths are secrets."""

import os
import subprocess
from pathlib import Path

import pytest
from ctxd.discovery.workspace import git_section, is_secret_path
from ctxd.hookclient.hook import git_root


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "src").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "src" / "a.py").write_text("a = 1\n")
    (root / "old.txt").write_text("old\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first commit: the server")
    return root


def test_workspace_is_the_git_top_level_or_the_cwd(repo: Path, tmp_path: Path) -> None:
    """The hook sends the checkout holding its cwd as `root`: the session made for it is
    scoped there; with no checkout (""), to the cwd itself."""
    assert git_root(str(repo / "src")) == git_root(str(repo)) == str(repo)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert git_root(str(plain)) == ""
    assert git_root(str(tmp_path / "missing")) == ""
    assert git_root("relative/dir") == ""


def test_git_section_branch_head_and_dirty_files(repo: Path) -> None:
    (repo / "src" / "a.py").write_text("a = 2\n")
    (repo / "new file.py").write_text("x\n")
    git(repo, "mv", "old.txt", "renamed.txt")
    section = git_section(str(repo))
    assert section is not None
    assert section.branch == "main"
    assert section.head is not None and len(section.head) >= 7
    assert section.subject == "first commit: the server"
    assert sorted(section.dirty) == ["new file.py", "renamed.txt", "src/a.py"]
    assert section.dirty_count == 3


def test_dirty_files_are_capped_but_counted(repo: Path) -> None:
    for i in range(30):
        (repo / f"f{i}.txt").write_text("x")
    section = git_section(str(repo), dirty_max=20)
    assert section is not None
    assert len(section.dirty) == 20 and section.dirty_count == 30


def test_repository_without_commits_and_detached_head(repo: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "dev")
    section = git_section(str(empty))
    assert section is not None and (section.branch, section.head) == ("dev", None)
    git(repo, "checkout", "-q", "--detach")
    detached = git_section(str(repo))
    assert detached is not None and detached.branch is None and detached.head


def test_not_a_repository_has_no_git_section(tmp_path: Path) -> None:
    assert git_section(str(tmp_path)) is None


@pytest.mark.parametrize(
    "path",
    [".env", "/srv/app/.env", "/srv/app/.env.production", "certs/server.pem", "tls.key",
     "~/.ssh/config", "/home/u/.ssh/known_hosts", "/root/id_ed25519", "id_rsa.pub",
     "/home/u/.aws/credentials", "/home/u/.netrc"],
)  # fmt: skip
def test_secret_paths(path: str) -> None:
    assert is_secret_path(path)


@pytest.mark.parametrize(
    "path", ["server.log", "/srv/app/.env.example", "dist/x.whl", "src/environment.py", ""]
)
def test_ordinary_paths(path: str) -> None:
    assert not is_secret_path(path)


def test_a_symlink_into_a_secret_is_a_secret(tmp_path: Path) -> None:
    secret = tmp_path / ".env"
    secret.write_text("TOKEN=x\n")
    link = tmp_path / "settings.txt"
    link.symlink_to(secret)
    assert is_secret_path(str(link))
