"""Typed runtime configuration of ctxd, read from CTXD_* environment variables."""

from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ctxd import user_data_dir


class Limits(BaseSettings):
    """Bounds that keep every request, collector and snapshot cheap."""

    model_config = SettingsConfigDict(env_prefix="CTXD_LIMIT_")

    max_body_bytes: int = Field(1_000_000, ge=1024)
    max_watches_per_session: int = Field(200, ge=1)
    log_lines_max: int = Field(500, ge=1)
    log_tail_bytes_max: int = Field(1_048_576, ge=4096)
    log_line_chars_max: int = Field(2000, ge=80)
    artifact_entries_max: int = Field(20_000, ge=1)
    fingerprint_chunk_bytes: int = Field(65_536, ge=1024)
    # Files up to this size get a full SHA-256; larger ones a sampled fingerprint.
    fingerprint_full_bytes_max: int = Field(64 * 2**20, ge=0)
    # Content hashed per collection; files beyond it wait for the next snapshot.
    fingerprint_budget_bytes: int = Field(512 * 2**20, ge=0)
    # New log bytes scanned for errors per snapshot: the newest ones when more arrived.
    log_scan_bytes_max: int = Field(8 * 2**20, ge=4096)
    command_output_chars_max: int = Field(20_000, ge=100)
    processes_per_watch_max: int = Field(256, ge=1)
    collector_timeout_s: float = Field(10.0, gt=0)


# Read-only by design; git's fsmonitor hook is switched off because a repo's config names it.
DEFAULT_COMMANDS: dict[str, list[str]] = {
    "nvidia-smi": ["nvidia-smi"],
    "git-status": ["git", "-c", "core.fsmonitor=", "status", "--short"],
    "pip-list": ["pip", "list"],
}


CONVERSATION_LIVE_S = 600.0


class Settings(BaseSettings):
    """Where ctxd keeps its data, where it listens and how often it looks."""

    model_config = SettingsConfigDict(env_prefix="CTXD_")

    data_dir: Path = Field(default_factory=user_data_dir)  # CTXD_DATA_DIR
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    token: str | None = None
    # One log line per request: off by default, since every hook and tool call is a request.
    access_log: bool = False
    # Read when `token` is unset (CTXD_TOKEN_FILE); `ctxd token --new` writes one, mode 0600.
    token_file: Path | None = None
    # Accounts besides ctxd's own (and root) whose loopback connections are answered without a
    # token: on a shared box no other account reads or steers through ctxd by default.
    allowed_uids: list[int] = Field(default_factory=list)
    # Host header values accepted besides loopback names and `host` (DNS-rebinding defence).
    allowed_hosts: list[str] = Field(default_factory=list)
    # Log, artifact and command-cwd watches must lie under these; empty: home, /tmp and cwd.
    watch_roots: list[Path] = Field(default_factory=list)
    # Token bucket per client address: sustained requests per second, and the burst allowed.
    rate_per_s: float = Field(200.0, gt=0)
    rate_burst: int = Field(1000, ge=1)
    sample_interval_s: float = Field(2.0, gt=0)
    cpu_sample_s: float = Field(0.1, ge=0, le=5)
    # A tree idle this long, with its port closed or its log silent, is reported as stuck.
    stuck_after_s: float = Field(120.0, gt=0)
    # A harness conversation seen within this long, and not ended, is taken to be running
    # (a second agent in the same checkout then gets a session of its own).
    conversation_live_s: float = CONVERSATION_LIVE_S

    @field_validator("conversation_live_s", mode="before")
    @classmethod
    def _a_positive_duration(cls, value: object) -> float:
        """Not a positive number of seconds: the default, rather than no ctxd at all."""
        try:
            seconds = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return CONVERSATION_LIVE_S
        return seconds if 0 < seconds < float("inf") else CONVERSATION_LIVE_S

    health_timeout_s: float = Field(1.0, gt=0, le=30)
    # Probing a URL on another host from a debugging daemon is an outbound request: opt in.
    allow_remote_health: bool = False
    gpu_probe_timeout_s: float = Field(5.0, gt=0, le=60)
    # Triggers: how often the watcher looks for quiet sessions and events, and how close
    # together two event snapshots of one session may come.
    trigger_interval_s: float = Field(2.0, gt=0, le=3600)
    # Probing watches for events costs a collection; exits are still caught within seconds.
    event_probe_s: float = Field(5.0, gt=0, le=3600)
    event_min_gap_s: float = Field(5.0, ge=0, le=3600)
    # A session with no activity this long and nothing alive in its watches goes dormant: not
    # probed at all until its next hook, request or page visit (issue 43: idle costs nothing).
    dormant_after_s: float = Field(4 * 3600.0, gt=0)
    # Waking an idle agent with its attempts' news (CTXD_WAKE=0: never, on the server's side).
    wake: bool = True
    # Slurm is probed for events less often: each look asks the cluster's shared controller.
    slurm_probe_s: float = Field(60.0, gt=0, le=3600)
    # how long a snapshot waits for a running job's nodes to answer through srun
    slurm_nodes_timeout_s: float = Field(10.0, gt=0, le=300)
    keep_days: int = Field(30, ge=1, le=3650)
    # Markdown files kept per session besides latest.md: the newest versions' (CTXD_MARKDOWN_FILES);
    # every version stays readable from the database. 0 keeps every version's file.
    markdown_files: int = Field(20, ge=0)
    # An automatic watch whose target (process, log, artifact) is gone this long retires.
    auto_retire_s: float = Field(900.0, ge=0, le=30 * 24 * 3600)
    # The only commands a `command` watch may run (CTXD_COMMANDS, JSON: name -> argv).
    commands: dict[str, list[str]] = Field(default_factory=lambda: dict(DEFAULT_COMMANDS))
    # Peers (watches with `host`): every host of a snapshot answers within this one deadline,
    # an answer larger than this is refused, and a peer that failed rests (the least, then
    # doubling up to the most) before it is asked again, so a dead host never costs each
    # snapshot a timeout.
    peer_deadline_s: float = Field(2.0, gt=0, le=60)
    peer_answer_bytes_max: int = Field(4 * 2**20, ge=4096)
    peer_backoff_min_s: float = Field(1.0, ge=0, le=3600)
    peer_backoff_max_s: float = Field(30.0, ge=0, le=3600)
    limits: Limits = Field(default_factory=Limits)

    @model_validator(mode="after")
    def _read_token_file(self) -> "Settings":
        if self.token is None and self.token_file is not None:
            try:
                self.token = self.token_file.read_text(encoding="utf-8").strip() or None
            except OSError as exc:
                why = exc.strerror or type(exc).__name__
                raise ValueError(f"cannot read token file {self.token_file}: {why}") from None
            if self.token is None:
                raise ValueError(f"token file {self.token_file} is empty")
        return self

    @property
    def db_path(self) -> Path:
        return self.data_dir / "ctxd.db"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"
