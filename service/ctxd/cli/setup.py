"""The setup subcommands: `ctxd install|uninstall claude|opencode`, `ctxd service
install|uninstall` and `ctxd doctor`; files on this machine, no call to the service but the
doctor's."""

import argparse
import os
import sys
from pathlib import Path

from ctxd.cli import service_unit
from ctxd.cli.commands import EXIT_SERVICE, EXIT_USAGE, CliError
from ctxd.harness.files import InstallError, apply
from ctxd.harness.hook import git_root
from ctxd.harness.registry import adapter


def doctor(args: argparse.Namespace) -> int:
    from ctxd.cli import doctor as checks

    project = Path(git_root(os.getcwd()) or os.getcwd())
    findings = list(checks.examine(args.url, Path.home(), project))
    for finding in findings:
        print(finding.line())
    return 0 if all(f.ok for f in findings) else EXIT_SERVICE


def install(args: argparse.Namespace) -> int:
    project = Path(git_root(os.getcwd()) or os.getcwd())
    try:
        harness = adapter(args.harness)
        changes = harness.plan(args.url, args.scope, project, Path.home(), args.remove)
    except InstallError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    changed = [c for c in changes if c.changed]
    if not changed:
        print("nothing to remove" if args.remove else "already installed: nothing to change")
    elif args.dry_run:
        print("\n".join(c.diff() for c in changed))
    else:
        for path in apply(changed):
            done = "removed" if not path.exists() else "cleaned" if args.remove else "updated"
            print(f"{done} {path}")
    return 0


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
        for path in apply(changes):
            print(f"{'removed' if remove else 'wrote'} {path}")
        print(service_unit.next_steps(remove))
    return 0
