"""Watches: one input model per kind (the `kind` tells them apart) and the stored watch."""

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, RootModel, field_validator, model_validator

from ctxd.models.base import PathText, Strict

# A peer's name (PUT /api/peers/{name}); a watch with `host` set to one is collected there.
PEER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
PeerName = Annotated[str, Field(pattern=PEER_NAME_PATTERN)]


class ProcessWatch(Strict):
    kind: Literal["process"] = "process"
    host: PeerName | None = None  # a peer's name: observed on that host
    pid: int | None = Field(None, ge=1, le=2**22)
    match: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    name: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    children: bool = True
    # Only processes working in this folder or under it: what ctxd watches by itself follows
    # the session's own attempts, never a same-named process of another directory.
    cwd: Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^/")] | None = None
    expect_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default=[], max_length=32)
    env: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default=[],
        max_length=64,
        description="variables (names or globs) to show besides the ones always shown: the"
        " CUDA_, NCCL_, TORCH_, HF_, SGLANG_, VLLM_ and *_DEBUG families, paths and ranks",
    )
    packages: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")]] = Field(
        default=[], max_length=32
    )

    @field_validator("match")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
            from ctxd.collectors._patterns import check  # late: collectors import models

            check(value)  # bounded compiled size: a 400 that says why, not 1 GB of RSS
        return value

    @model_validator(mode="after")
    def _one_target(self) -> "ProcessWatch":
        if [self.pid, self.match, self.name].count(None) != 2:
            raise ValueError("give exactly one of 'pid', 'match' or 'name'")
        return self


class LogWatch(Strict):
    kind: Literal["log"] = "log"
    host: PeerName | None = None  # a peer's name: observed on that host
    path: PathText
    lines: int = Field(40, ge=1, le=500)
    files: int = Field(5, ge=1, le=20, description="newest files shown when path is a glob")
    errors: list[Annotated[str, Field(min_length=1, max_length=500)]] = Field(
        default=[], max_length=20, description="extra regular expressions of error lines"
    )

    @field_validator("errors")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression {pattern!r}: {exc}") from None
        from ctxd.collectors._patterns import check_all  # late: collectors import models

        check_all(value)  # compiled together, so bounded together
        return value


class ArtifactWatch(Strict):
    kind: Literal["artifact"] = "artifact"
    host: PeerName | None = None  # a peer's name: observed on that host
    path: PathText


class CommandWatch(Strict):
    """A command from the server's allowlist, by its configured name or its exact argv."""

    kind: Literal["command"] = "command"
    host: PeerName | None = None  # a peer's name: observed on that host
    name: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    argv: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, min_length=1, max_length=64
    )
    timeout_s: float = Field(10.0, gt=0, le=60)
    cwd: PathText | None = None

    @model_validator(mode="after")
    def _one_target(self) -> "CommandWatch":
        if (self.name is None) == (self.argv is None):
            raise ValueError("give exactly one of 'name' or 'argv'")
        return self


class PortWatch(Strict):
    kind: Literal["port"] = "port"
    port: int = Field(ge=1, le=65535)
    # the address probed, or a peer's name: then port `port` is probed on that peer's loopback
    host: Annotated[str, Field(min_length=1, max_length=255)] = "127.0.0.1"
    url: Annotated[str, Field(max_length=2048, pattern=r"^https?://")] | None = None


class SlurmWatch(Strict):
    """Slurm jobs: one by id, the jobs of a name, or this user's (under `workdir` when given)."""

    kind: Literal["slurm"] = "slurm"
    host: PeerName | None = None  # a peer's name: asked on that host (its Slurm client)
    job: Annotated[str, Field(pattern=r"^[0-9]{1,12}(_[0-9]{1,9})?$")] | None = None
    name: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    mine: bool = False
    workdir: PathText | None = None
    jobs: int = Field(5, ge=1, le=50, description="newest jobs shown for a name or mine")
    lines: int = Field(20, ge=1, le=500, description="lines of each job's stdout and stderr")
    tasks: bool = Field(
        True, description="a running job's processes, collected on its nodes through srun"
    )
    # signals: pending longer than this; running with its output silent longer than this
    pending_after_s: float = Field(600.0, ge=0, le=30 * 86400)
    silent_after_s: float = Field(300.0, ge=0, le=30 * 86400)

    @model_validator(mode="after")
    def _one_target(self) -> "SlurmWatch":
        if [self.job is not None, self.name is not None, self.mine].count(True) != 1:
            raise ValueError("give exactly one of 'job', 'name' or 'mine': true")
        if self.workdir is not None and not self.mine:
            raise ValueError("'workdir' narrows 'mine': true")
        return self


RAY_DASHBOARD = "http://127.0.0.1:8265"  # Ray's default dashboard


class RayWatch(Strict):
    """A Ray cluster, read through its dashboard's state API: nodes, actors, long tasks."""

    kind: Literal["ray"] = "ray"
    host: PeerName | None = None  # a peer's name: asked on that host
    url: Annotated[str, Field(max_length=2048, pattern=r"^https?://")] = RAY_DASHBOARD
    address: Literal["auto"] | None = Field(
        None, description="'auto': the dashboard found as Ray finds its cluster, at each look"
    )
    job: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{1,64}$")] | None = None
    actors: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        None, description="only the actors whose name holds this text"
    )

    @model_validator(mode="after")
    def _url_or_auto(self) -> "RayWatch":
        # a stored watch holds the default url beside its address: the same watch
        if self.address is not None and self.url != RAY_DASHBOARD:
            raise ValueError("give 'url' or 'address': 'auto', not both")
        return self


WatchSpec = Annotated[
    ProcessWatch | LogWatch | ArtifactWatch | PortWatch | CommandWatch | SlurmWatch | RayWatch,
    Field(discriminator="kind"),
]


class WatchIn(RootModel[WatchSpec]):
    """A watch as posted: one of the kinds, told apart by `kind`."""


class Watch(BaseModel):
    id: int
    session: str
    created_at: datetime
    spec: WatchSpec
    # added by ctxd from the agent's actions or the machine, with why; removable like any
    auto: bool = False
    reason: str | None = None
