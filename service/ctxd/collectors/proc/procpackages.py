"""Which Python packages a process runs with: its site folders, and the versions found there."""

import os
import re
from pathlib import Path

_NORMALISE = re.compile(r"[-_.]+")
SITE_DIRS_MAX = 16


def normalise(name: str) -> str:
    return _NORMALISE.sub("_", name).lower()


def _prefixes(argv0: str, exe: str | None, environ: dict[str, str], cwd: str | None) -> list[str]:
    """Where the process's sys.prefix can be: its venv first, then the interpreter's own tree.

    /proc/pid/exe resolves symlinks, which loses a venv (bin/python -> /usr/bin/python3), so
    the venv is found from the environment and from argv[0] as the process itself ran it.
    """
    found = [environ[k] for k in ("VIRTUAL_ENV", "CONDA_PREFIX") if environ.get(k)]
    program = argv0
    if program and "/" not in program:
        for folder in environ.get("PATH", "").split(":"):
            if folder and os.path.exists(os.path.join(folder, program)):
                program = os.path.join(folder, program)
                break
    elif program and not program.startswith("/") and cwd:
        program = os.path.join(cwd, program)
    for path in (program, exe):
        if path and path.startswith("/"):
            found.append(os.path.dirname(os.path.dirname(path)))
    return list(dict.fromkeys(found))


def site_dirs(
    argv0: str, exe: str | None, environ: dict[str, str], cwd: str | None, root: str = ""
) -> list[Path]:
    """Folders its interpreter imports packages from; `root` is /proc/<pid>/root or ""."""
    dirs: list[Path] = []
    extra = [p for p in environ.get("PYTHONPATH", "").split(":") if p.startswith("/")]
    for prefix in _prefixes(argv0, exe, environ, cwd):
        base = Path(root + prefix)
        for pattern in ("lib/python3*/site-packages", "lib/python3*/dist-packages"):
            dirs.extend(sorted(base.glob(pattern)))
        if prefix == "/usr":
            dirs.extend(sorted(Path(root + "/usr/local").glob("lib/python3*/dist-packages")))
    dirs.extend(Path(root + p) for p in extra)
    return [d for d in dict.fromkeys(dirs) if d.is_dir()][:SITE_DIRS_MAX]


# The versions that decide how a GPU inference or training stack behaves, read for every
# Python root without being asked: torch (with its CUDA build), the CUDA runtime and NCCL
# wheels, triton, flashinfer, vllm, sglang, sgl-kernel, transformers.
STACK_PACKAGES = (
    "torch", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13", "nvidia-nccl-cu12",
    "nvidia-nccl-cu13", "triton", "flashinfer-python", "flashinfer", "vllm", "sglang",
    "sgl-kernel", "transformers",
)  # fmt: skip
_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", re.M)
_LISTINGS: dict[Path, tuple[int, list[str]]] = {}


def _listing(folder: Path) -> list[str]:
    """os.listdir of a site folder, kept until the folder changes (installs touch it)."""
    stamp = folder.stat().st_mtime_ns
    kept = _LISTINGS.get(folder)
    if kept is None or kept[0] != stamp:
        if len(_LISTINGS) > 256:
            _LISTINGS.clear()
        kept = _LISTINGS[folder] = (stamp, os.listdir(folder))
    return kept[1]


def stack_versions(dirs: list[Path]) -> dict[str, str]:
    """The STACK_PACKAGES installed in `dirs`; torch's says which CUDA it was built for."""
    found = {n: v for n, v in package_versions(dirs, list(STACK_PACKAGES)).items()
             if v != "not installed"}  # fmt: skip
    if "torch" in found and "+" not in found["torch"]:
        for folder in dirs:
            try:
                text = (folder / "torch" / "version.py").read_text()[:4096]
            except OSError:
                continue
            m = _TORCH_CUDA.search(text)
            found["torch"] += f" (CUDA {m.group(1)})" if m else " (CPU build)"
            break
    return found


def package_versions(dirs: list[Path], names: list[str]) -> dict[str, str]:
    """{name: version} from `*.dist-info` / `*.egg-info` folder names, first folder wins."""
    wanted = {normalise(n): n for n in names}
    found: dict[str, str] = {}
    for folder in dirs:
        try:
            entries = _listing(folder)
        except OSError:
            continue
        for entry in entries:
            stem, dot, suffix = entry.rpartition(".")
            if not dot or suffix not in ("dist-info", "egg-info"):
                continue
            name, _, version = stem.partition("-")
            original = wanted.get(normalise(name))
            if original and original not in found and version:
                found[original] = version.split("-")[0]
    return {n: found.get(n, "not installed") for n in names}
