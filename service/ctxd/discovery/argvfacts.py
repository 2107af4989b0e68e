"""Facts one program's argv states: ports it will listen on, log files, files it reads, builds,
the health URLs it asks.

Pure and tolerant: any list of strings is accepted, nothing raises.
"""

import re
from dataclasses import dataclass

NOT_FILES = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"}
LOG_FLAG = re.compile(r"^--?(?:log[-_]?file|log[-_]path|log[-_]file[-_]?name|log|output[-_]log)$")
_PORT_FLAG = re.compile(r"^--?(?:port|http[-_]port|server[-_]port|listen[-_]port|api[-_]port)$")
_ADDRESS_FLAG = re.compile(r"^--?(?:listen|bind|address|addr|host|host[-_]port|endpoint)$")
_HOST_PORT = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*://)?(?:localhost|\[[0-9a-f:]*\]|[0-9]{1,3}(?:\.[0-9]{1,3}){3}|"
    r"[a-z0-9][a-z0-9.-]*)?:([0-9]{2,5})(?:/.*)?$",
    re.IGNORECASE,
)
# A bare `host:N` argument counts only with a host that is plainly an address: `ckpt:12` or
# `10:00` is not a port.
_ADDRESS_ARG = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*://[^/:]+|localhost|\[[0-9a-f:]*\]|[0-9]{1,3}(?:\.[0-9]{1,3}){3})"
    r":([0-9]{2,5})(?:/.*)?$",
    re.IGNORECASE,
)
_COMPILERS = re.compile(r"^(?:nvcc|gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(?:-[0-9.]+)?$")


@dataclass(frozen=True)
class Build:
    tool: str
    argv: tuple[str, ...]
    outputs: tuple[str, ...] = ()  # only where the command states them


def _flag_values(argv: list[str], pattern: re.Pattern[str]) -> list[str]:
    values = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if pattern.match(name):
            if eq:
                values.append(value)
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                values.append(argv[i + 1])
    return values


def ports_of(argv: list[str]) -> list[int]:
    found: list[str] = _flag_values(argv, _PORT_FLAG)
    for i, arg in enumerate(argv[:-1]):
        if arg in ("-p", "--publish"):
            # `-p 8000`, and docker's `-p [ip:]8000:80`, whose first port is the host's.
            parts = argv[i + 1].split(":")
            host_port = parts[-2] if len(parts) >= 2 else parts[0]
            if host_port.isdigit():
                found.append(host_port)
    if "http.server" in argv[:3]:  # `python3 -m http.server [--bind A] [-d DIR] [PORT]`
        found += _http_server_port(argv[argv.index("http.server") + 1 :])
    for value in _flag_values(argv, _ADDRESS_FLAG):
        if match := _HOST_PORT.match(value):
            found.append(match[1])
    for arg in argv[1:]:
        if match := _ADDRESS_ARG.match(arg):
            found.append(match[1])
    ports = [int(p) for p in found if p.isdigit() and 0 < int(p) < 65536]
    return list(dict.fromkeys(ports))


# A health or readiness URL on this machine, as an agent checks a server it started (curl,
# wget, httpx, a `python3 -c` with urllib): the URL and its port.
_HEALTH_URL = re.compile(
    r"(?:https?://|(?<![\w.:/@-]))(?:127\.0\.0\.1|localhost|\[::1\]):([0-9]{1,5})"
    r"/(?:health[\w-]{0,32}|healthz|readyz?|livez?|ping|v1/models|get_model_info|get_server_info)"
    r"/?(?![\w/?&.=-])"
)
# What makes a request more than a look (a body, another method, an upload): never repeated.
_NOT_A_LOOK = re.compile(
    r"(?:^|\s)(?:-X|--request|-d|--data[\w-]*|-F|--form|-T|--upload-file|--json|--post[\w-]*)\b"
    r"|\b(?:data|method|json|content)\s*="
)


def health_urls(argv: list[str]) -> list[tuple[int, str]]:
    """(port, URL) of each loopback health URL the program only looks at (a GET): a URL with
    a body, another method or an upload anywhere on the line is not one."""
    line = " ".join(argv)
    if _NOT_A_LOOK.search(line):
        return []
    found = [
        (int(m[1]), m[0] if m[0].startswith("http") else f"http://{m[0]}")  # curl's default
        for m in _HEALTH_URL.finditer(line)
        if 0 < int(m[1]) < 65536
    ]
    return list(dict.fromkeys(found))


def _http_server_port(args: list[str]) -> list[str]:
    """The port `python3 -m http.server` is given: its one positional argument, wherever it
    stands among the options (those that take a value skipped with it)."""
    taking = {"-b", "--bind", "-d", "--directory", "-p", "--protocol"}
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in taking:
            skip = True
        elif not arg.startswith("-"):
            return [arg] if arg.isdigit() else []
    return []


def log_flags(argv: list[str]) -> list[str]:
    values = _flag_values(argv, LOG_FLAG)
    # `--log debug` is a level, not a file: a log path has a slash or an extension.
    return [v for v in values if "/" in v or re.search(r"\.[A-Za-z0-9]{1,8}$", v)]


def tee_targets(argv: list[str]) -> list[str]:
    return [a for a in argv[1:] if not a.startswith("-") and a not in NOT_FILES]


def read_files(argv: list[str]) -> list[str]:
    head = argv[0].rsplit("/", 1)[-1]
    if head in ("tail", "head", "less"):
        files, skip = [], False
        for arg in argv[1:]:
            if skip:
                skip = False
            elif arg in ("-n", "-c", "--lines", "--bytes", "-s", "--pid"):
                skip = True
            elif not arg.startswith(("-", "+")):
                files.append(arg)
        return files
    if head in ("grep", "egrep", "fgrep", "rg", "zgrep"):
        operands, pattern_given, skip = [], False, False
        for arg in argv[1:]:
            if skip:
                skip = False
            elif arg in ("-e", "-f", "--regexp", "--file"):
                pattern_given, skip = True, True
            elif arg in ("-m", "-A", "-B", "-C", "--max-count", "-g", "--glob", "-t"):
                skip = True
            elif not arg.startswith("-"):
                operands.append(arg)
        files = operands if pattern_given else operands[1:]
        return [f for f in files if f not in NOT_FILES]
    return []


def build_of(argv: list[str]) -> Build | None:
    head = argv[0].rsplit("/", 1)[-1]
    args = argv[1:]
    if head in ("make", "gmake", "ninja"):
        return Build(head, tuple(argv), tuple(_flag_values(argv, re.compile(r"^-C$"))))
    if head == "cmake" and "--build" in args:
        index = args.index("--build")
        out = args[index + 1 : index + 2]
        return Build("cmake", tuple(argv), tuple(out))
    if head == "cargo" and args[:1] in (["build"], ["b"]):
        return Build("cargo", tuple(argv), tuple(_flag_values(argv, re.compile(r"^--target-dir$"))))
    if re.match(r"^pip[0-9.]*$", head) and args[:1] == ["wheel"]:
        out = _flag_values(argv, re.compile(r"^(?:-w|--wheel-dir)$"))
        return Build("pip wheel", tuple(argv), tuple(out))
    if re.match(r"^(?:python|pypy)[0-9.]*$", head):
        if args[:2] == ["-m", "build"]:
            out = _flag_values(argv, re.compile(r"^(?:-o|--outdir)$"))
            return Build("python -m build", tuple(argv), tuple(out))
        if args[:3] == ["-m", "pip", "wheel"]:
            out = _flag_values(argv, re.compile(r"^(?:-w|--wheel-dir)$"))
            return Build("pip wheel", tuple(argv), tuple(out))
        if args and args[0].endswith("setup.py"):
            out = _flag_values(argv, re.compile(r"^(?:-d|--dist-dir)$"))
            return Build("setup.py", tuple(argv), tuple(out))
    if head == "uv" and args[:1] == ["build"]:
        return Build("uv build", tuple(argv), tuple(_flag_values(argv, re.compile(r"^-o$"))))
    if _COMPILERS.match(head):
        out = _flag_values(argv, re.compile(r"^-o$"))
        out += [a[2:] for a in args if a.startswith("-o") and len(a) > 2]
        return Build(head, tuple(argv), tuple(out))
    return None
