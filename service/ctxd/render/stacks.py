"""A folded Python stack as the dump prints it: the main thread first, idle helper threads alike
in one line.

py-spy lists a process's threads as it finds them; a CUDA worker has a dozen threads idle in
`Event.wait` (NCCL watchdogs, pin-memory, a logger) and one main thread that says where the job
is. The main thread leads; threads whose frames are all the same fold into one line with their
count, so eight workers' stacks read in a few lines. Pure: py-spy's lines in, lines out.
"""

import re

_THREAD = re.compile(r'^thread "(?P<name>[^"]*)"')


def threads(lines: list[str]) -> list[str]:
    """`lines` (py-spy's, a `thread "NAME" (state)` line then its frames, innermost first)
    reordered: the main thread whole, then every other distinct stack once with its count."""
    blocks: list[list[str]] = []
    for line in lines:
        if _THREAD.match(line) or not blocks:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    main = [b for b in blocks if _name(b) == "MainThread"]
    others: dict[tuple[str, ...], list[str]] = {}
    for block in blocks:
        if _name(block) != "MainThread":
            others.setdefault(tuple(block[1:]), []).append(_name(block))
    out = [line for block in main for line in block]
    for frames, names in others.items():
        if len(names) == 1:
            out += [f'thread "{names[0]}"', *frames]
        else:
            where = frames[0].strip() if frames else "?"
            shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
            out.append(f"{len(names)} more threads ({shown}) alike, innermost in {where}")
    return out


def _name(block: list[str]) -> str:
    m = _THREAD.match(block[0])
    return m.group("name") if m else ""
