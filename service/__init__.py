"""ctxd: context snapshots and session recovery for long AI-agent work sessions."""

__version__ = "0.1.0"
