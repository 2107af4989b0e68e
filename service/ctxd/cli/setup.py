"""The setup subcommands: `ctxd install|uninstall [HARNESS]`, `ctxd service
install|uninstall` and `ctxd doctor`; files on this machine, no call to the service but the
doctor's."""

import argparse
import os
import shutil
import sys
from pathlib import Path

from ctxd.cli import service_unit
from ctxd.cli.commands import EXIT_SERVICE, EXIT_USAGE, CliError
from ctxd.harness.adapter import HarnessName
from ctxd.harness.files import InstallError, apply
from ctxd.harness.hook import git_root
from ctxd.harness.registry import MODULES, adapter


def doctor(args: argparse.Namespace) -> int:
    from ctxd.cli import doctor as checks

    project = Path(git_root(os.getcwd()) or os.getcwd())
    findings = list(checks.examine(args.url, Path.home(), project))
    for finding in findings:
        print(finding.line())
    return 0 if all(f.ok for f in findings) else EXIT_SERVICE


def install(args: argparse.Namespace) -> int:
    """`ctxd install|uninstall [HARNESS]`: the harness named, or each one found on this
    machine (its command on PATH, or for an uninstall ctxd wired into it)."""
    project = Path(git_root(os.getcwd()) or os.getcwd())
    names = [args.harness] if args.harness else [n for n in MODULES if _found(n, args, project)]
    if not names:
        verb = "uninstall" if args.remove else "install"
        found = "ctxd is not wired into any harness" if args.remove else "no harness found"
        print(f"{found} (known: {', '.join(MODULES)}); name one: `ctxd {verb} claude`")
        return 0
    for name in names:
        _install_one(name, args, project, said_which=not args.harness)
    return 0


def _found(name: HarnessName, args: argparse.Namespace, project: Path) -> bool:
    harness = adapter(name)
    if not args.remove:
        return shutil.which(harness.program) is not None
    try:
        plan = harness.plan(args.url, args.scope, project, Path.home(), True)
    except InstallError:
        return True  # said when it is tried
    return any(c.changed for c in plan)


def _install_one(name: HarnessName, args: argparse.Namespace, project: Path, said_which: bool):
    harness = adapter(name)
    prefix = f"{harness.label}: " if said_which else ""
    try:
        changes = harness.plan(args.url, args.scope, project, Path.home(), args.remove)
    except InstallError as exc:
        raise CliError(prefix + str(exc), EXIT_USAGE) from None
    changed = [c for c in changes if c.changed]
    if not changed:
        print(
            prefix
            + ("nothing to remove" if args.remove else "already installed: nothing to change")
        )
    elif args.dry_run:
        print("\n".join(c.diff() for c in changed))
    else:
        for path, done in apply(changed, remove=args.remove):
            print(f"{prefix}{done} {path}")
        if not args.remove:
            for note in harness.notes(args.scope):
                print(f"{prefix}note: {note}")


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
    if not changes:
        print("nothing to remove" if remove else "already installed: nothing to change")
    elif args.dry_run:
        print("\n".join(c.diff() for c in changes))
    else:
        for path, done in apply(changes, remove=remove):
            print(f"{done} {path}")
        print(service_unit.next_steps(remove))
    return 0
