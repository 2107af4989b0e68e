"""The setup subcommands: `ctxd install|uninstall [HARNESS]`, `ctxd service
install|uninstall` and `ctxd doctor`; files on this machine, no call to the service but the
doctor's."""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from ctxd.cli import service_unit
from ctxd.cli.commands import EXIT_SERVICE, EXIT_USAGE, CliError
from ctxd.harness.adapter import HarnessName
from ctxd.harness.files import InstallError, apply
from ctxd.harness.registry import MODULES, adapter
from ctxd.hookclient.hook import git_root


def doctor(args: argparse.Namespace) -> int:
    from ctxd.cli import doctor as checks

    project = Path(git_root(os.getcwd()) or os.getcwd())
    findings = list(checks.examine(args.url, Path.home(), project))
    if getattr(args, "json", False):
        print(json.dumps([vars(f) for f in findings], indent=2))
    else:
        print("\n".join(f.line() for f in findings))
    return 0 if all(f.ok for f in findings) else EXIT_SERVICE


def install(args: argparse.Namespace) -> int:
    """`ctxd install|uninstall [HARNESS]`: the harness named, or each one found on this
    machine (its command on PATH or its settings folder, or for an uninstall ctxd wired into
    it); none found for an install is an error. One line per file written (with --json, one
    object per harness)."""
    project = Path(git_root(os.getcwd()) or os.getcwd())
    names = [args.harness] if args.harness else [n for n in MODULES if _found(n, args, project)]
    done = [_install_one(name, args, project) for name in names]
    if getattr(args, "json", False):
        print(json.dumps(done, indent=2))
    elif not names and args.remove:
        print(f"ctxd is not wired into any harness (known: {', '.join(MODULES)})")
    elif not names:  # nothing done: said as an error, for a script and a person alike
        harnesses = [adapter(n) for n in MODULES]
        looked = "; ".join(
            f"{h.label}: `{h.program}` on PATH or {h.config_home(Path.home())}" for h in harnesses
        )
        raise CliError(f"no agent harness found (looked for {looked}); name one: `ctxd install"
                       " claude`", EXIT_USAGE)  # fmt: skip
    else:
        for said in done:
            _say(said, "" if args.harness else f"{adapter(said['harness']).label}: ", args.remove)
    return 0


def _say(said: dict[str, Any], prefix: str, remove: bool) -> None:
    if said["diff"]:
        print(said["diff"])
    for path, what in said["files"]:
        print(f"{prefix}{what} {path}")
    if not said["files"] and not said["diff"]:
        print(prefix + ("nothing to remove" if remove else "already installed: nothing to change"))
    for note in said["notes"]:
        print(f"{prefix}note: {note}")


def _found(name: HarnessName, args: argparse.Namespace, project: Path) -> bool:
    harness = adapter(name)
    if not args.remove:  # its program on PATH, or its settings folder (run by a path or alias)
        return (
            shutil.which(harness.program) is not None or harness.config_home(Path.home()).is_dir()
        )
    try:
        plan = harness.plan(args.url, args.scope, project, Path.home(), True)
    except InstallError:
        return True  # said when it is tried
    return any(c.changed for c in plan)


def _install_one(name: HarnessName, args: argparse.Namespace, project: Path) -> dict[str, Any]:
    """What an install (or uninstall, or a dry run of either) did to one harness's files."""
    harness = adapter(name)
    try:
        changes = harness.plan(
            args.url, args.scope, project, Path.home(), args.remove, wake=args.wake
        )
    except InstallError as exc:
        prefix = "" if args.harness else f"{harness.label}: "
        raise CliError(prefix + str(exc), EXIT_USAGE) from None
    changed = [c for c in changes if c.changed]
    said: dict[str, Any] = {"harness": name, "files": [], "diff": "", "notes": []}
    if args.dry_run:
        said["diff"] = "\n".join(c.diff() for c in changed)
    elif changed:
        said["files"] = [(str(path), what) for path, what in apply(changed, remove=args.remove)]
        said["notes"] = [] if args.remove else harness.notes(args.scope)
    return said


def always_on(args: argparse.Namespace) -> int:
    """`ctxd service install|uninstall`: a systemd user unit, or a launchd agent on macOS."""
    remove = args.action == "uninstall"
    if sys.platform == "darwin":
        where = f"~/Library/LaunchAgents/{service_unit.LAUNCHD_LABEL}.plist"
        if remove:
            print(f"launchctl unload -w {where} && rm {where}")
        else:
            print(service_unit.plist_text(args.url, Path.home()), end="")
            print(f"# save it as {where}, then: launchctl load -w {where}", file=sys.stderr)
        return 0
    try:
        changes = [c for c in service_unit.plan(args.url, Path.home(), remove) if c.changed]
    except InstallError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    said: dict[str, Any]
    if args.dry_run:
        said = {"files": [], "diff": "\n".join(c.diff() for c in changes), "next": ""}
    else:
        files = [(str(path), done) for path, done in apply(changes, remove=remove)]
        said = {
            "files": files,
            "diff": "",
            "next": service_unit.next_steps(remove) if files else "",
        }
    if getattr(args, "json", False):
        print(json.dumps(said, indent=2))
        return 0
    if not changes:
        print("nothing to remove" if remove else "already installed: nothing to change")
    for path, done in said["files"]:
        print(f"{done} {path}")
    for text in (said["diff"], said["next"]):
        if text:
            print(text)
    return 0
