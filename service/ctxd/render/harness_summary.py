"""A harness's own compaction summary beside ctxd's dump of the same version, for the version
page: what the summary says, and the facts of the dump it leaves out (the processes, ports,
flags, files and errors a person or the next session would have lost with the summary alone).
"""

import re
from dataclasses import dataclass
from datetime import datetime

# The facts a dump states that a summary may drop, each read as the words a reader would
# look for: a pid, a port, a command-line flag, a file by its name, an exception's name.
_FACTS = (
    re.compile(r"\bpid (\d+)"),
    re.compile(r"\bport (\d{2,5})\b"),
    re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)"),
    re.compile(r"(?<![\w/.-])([\w./-]*[\w-]\.(?:log|py|sh|whl|json|ya?ml|toml|txt|csv|pt|ckpt))\b"),
    re.compile(r"\b([A-Z]\w*(?:Error|Exception))\b"),
)
ONLY_IN_DUMP_MAX = 40


@dataclass
class HarnessSummary:
    harness: str  # who wrote it: "Claude Code"
    at: datetime  # when the harness gave it (just after the version was taken)
    text: str  # the summary as kept (redacted)
    only_in_dump: list[str]  # the dump's facts the summary never names, in the dump's order


def beside(kept: dict[str, str] | None, dump: str) -> HarnessSummary | None:
    """The summary kept with a version (the store's {harness, text, at}), set beside that
    version's dump (Markdown); None when the version has none."""
    if not kept:
        return None
    text = kept.get("text", "")
    return HarnessSummary(
        harness=kept.get("harness", ""),
        at=datetime.fromisoformat(kept["at"]),
        text=text,
        only_in_dump=only_in(dump, text),
    )


def only_in(dump: str, summary: str) -> list[str]:
    """The facts of `dump` (pids, ports, flags, file names, exception names) that `summary`
    does not name, each once, in the order the dump states them."""
    found: dict[str, int] = {}
    for pattern in _FACTS:
        for match in pattern.finditer(dump):
            found.setdefault(match[0], match.start())
    facts = sorted(found, key=found.__getitem__)
    missing = [fact for fact in facts if _word(fact) not in summary]
    return missing[:ONLY_IN_DUMP_MAX]


def _word(fact: str) -> str:
    """What a summary would say of a fact: a pid's or port's number, else the fact itself."""
    return fact.split()[-1] if fact.startswith(("pid ", "port ")) else fact
