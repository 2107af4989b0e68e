"""Old name of `service.triggers` (the trigger loop), kept until app.py imports from there."""

from service.triggers import EVENT_SOURCES, Activity, Watcher, detect_events

__all__ = ["EVENT_SOURCES", "Activity", "Watcher", "detect_events"]
