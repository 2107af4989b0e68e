"""`ctxd service install|uninstall`: ctxd always on, as a systemd user unit (Linux) or a
launchd agent (macOS, printed for the person to place), serving this installation's ctxd on
the per-user data directory. Switched off by `ctxd service uninstall`.

The unit file is ctxd's whole, recognised by its first line; one that is not ours is never
touched. Standard library only.
"""

import os
import plistlib
import shlex
import sys
from pathlib import Path
from urllib.parse import urlsplit

from ctxd.harness.files import Change, InstallError, read_text
from ctxd.hookclient.autostart import data_dir
from ctxd.hookclient.request import LOOPBACK

UNIT_NAME = "ctxd.service"
UNIT_MARK = "# ctxd: written by `ctxd service install`"
LAUNCHD_LABEL = "dev.ctxd.serve"


def serve_argv(url: str) -> list[str]:
    """This installation's `ctxd serve` for `url`, on the per-user data directory."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    if host not in LOOPBACK:
        raise InstallError(
            f"an always-on service at {host} would need a token; the unit serves loopback "
            "addresses only (run `ctxd serve` with CTXD_TOKEN_FILE yourself)"
        )
    script = Path(sys.executable).with_name("ctxd")
    program = [str(script)] if script.exists() else [sys.executable, "-m", "ctxd"]
    port = str(parts.port or 8765)
    return [*program, "serve", "--host", host, "--port", port, "--data-dir", str(data_dir())]


def unit_path(home: Path) -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    return Path(base) / "systemd" / "user" / UNIT_NAME


def unit_text(url: str) -> str:
    """The systemd user unit; `%` and `$` doubled, as systemd reads `%x` as a specifier and
    expands `$VAR` in ExecStart. No After=network.target: a user manager has no such unit."""
    exec_start = _escaped(shlex.join(serve_argv(url)))
    token_file = _escaped(shlex.quote(str(data_dir() / "token")))
    return "\n".join(
        [
            UNIT_MARK,
            "[Unit]",
            "Description=ctxd: context snapshots and session recovery for agent sessions",
            "",
            "[Service]",
            "Type=simple",
            "# It serves loopback without a token: every local user can read the dumps. To",
            "# require one, run `ctxd token --new` and uncomment the next line.",
            f"# Environment=CTXD_TOKEN_FILE={token_file}",
            f"ExecStart={exec_start}",
            "Restart=on-failure",
            "RestartSec=5",
            "",
            "[Install]",
            "WantedBy=default.target",
            "",
        ]
    )


def _escaped(text: str) -> str:
    return text.replace("%", "%%").replace("$", "$$")


def plist_text(url: str, home: Path) -> str:
    """The launchd agent for ~/Library/LaunchAgents/dev.ctxd.serve.plist (macOS)."""
    log = str(home / "Library" / "Logs" / "ctxd.log")
    agent = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": serve_argv(url),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "StandardOutPath": log,
        "StandardErrorPath": log,
    }
    return plistlib.dumps(agent).decode()


def plan(url: str, home: Path, remove: bool) -> list[Change]:
    """The unit file written (or, with `remove`, removed) and the enable link `systemctl
    --user enable` made for it, which would otherwise be left dangling."""
    path = unit_path(home)
    before = read_text(path)
    if before and not before.startswith(UNIT_MARK):
        raise InstallError(f"{path} was not written by ctxd; not touched")
    changes = [Change(path, before, "" if remove else unit_text(url), backup=False)]
    wanted = path.parent / "default.target.wants" / UNIT_NAME
    if remove and wanted.is_symlink():
        changes.append(Change(wanted, "(link)", "", backup=False))
    return changes


def next_steps(remove: bool) -> str:
    if remove:
        return "stop the one running: systemctl --user stop ctxd.service"
    return "start it now and at every login: systemctl --user daemon-reload && " \
        "systemctl --user enable --now ctxd.service"  # fmt: skip
