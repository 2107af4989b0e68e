"""Watch admission: the one rule a watch passes before this host runs it, whoever asks (a
client, ctxd's own discovery, a peer): the command allowlist, then the watch roots."""

from typing import TypeVar

from ctxd import confine
from ctxd.collectors import commands
from ctxd.settings import Settings

T = TypeVar("T")


def admit(spec: T, settings: Settings) -> T:
    """The spec as this host will run it (a command watch kept by its allowlist name), or
    `Refused` / `Invalid` saying why not."""
    spec = commands.allowlisted(spec, settings)
    confine.within_roots(spec, settings)
    return spec
