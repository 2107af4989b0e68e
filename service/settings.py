"""Typed runtime configuration of ctxd, read from CTXD_* environment variables."""

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Limits(BaseSettings):
    """Bounds that keep every request, collector and snapshot cheap."""

    model_config = SettingsConfigDict(env_prefix="CTXD_LIMIT_")

    max_body_bytes: int = Field(1_000_000, ge=1024)
    max_watches_per_session: int = Field(200, ge=1)
    log_lines_max: int = Field(500, ge=1)
    log_tail_bytes_max: int = Field(1_048_576, ge=4096)
    log_line_chars_max: int = Field(2000, ge=80)
    artifact_entries_max: int = Field(5000, ge=1)
    fingerprint_chunk_bytes: int = Field(65_536, ge=1024)
    processes_per_watch_max: int = Field(256, ge=1)
    collector_timeout_s: float = Field(10.0, gt=0)


class Settings(BaseSettings):
    """Where ctxd keeps its data, where it listens and how often it looks."""

    model_config = SettingsConfigDict(env_prefix="CTXD_")

    data_dir: Path = Path("snapshots")
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    token: str | None = None
    sample_interval_s: float = Field(2.0, gt=0)
    cpu_sample_s: float = Field(0.1, ge=0, le=5)
    limits: Limits = Field(default_factory=Limits)

    @property
    def db_path(self) -> Path:
        return self.data_dir / "ctxd.db"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"
