"""Geometry of the pages' inline SVG pictures (sparklines, the version strip); pure, no markup."""

from dataclasses import dataclass, field

from ctxd.models import SEVERITY_ORDER, Signal


@dataclass(frozen=True)
class Sparkline:
    """A series drawn as polylines; a version without a value breaks the line (a gap)."""

    width: int
    height: int
    segments: list[str] = field(default_factory=list)
    dots: list[tuple[float, float]] = field(default_factory=list)
    peak: float | None = None
    last: float | None = None


def sparkline(values: list[float | None], width: int = 160, height: int = 28) -> Sparkline:
    """Scale `values` from 0 to their peak: a flat line at 0% CPU must look flat, not noisy."""
    present = [v for v in values if v is not None]
    if not present:
        return Sparkline(width, height)
    peak = max(present)
    pad = 2.0
    span = (width - 2 * pad) / (len(values) - 1) if len(values) > 1 else 0.0

    def point(i: int, v: float) -> tuple[float, float]:
        x = pad + i * span if len(values) > 1 else width / 2
        y = height - pad - (v / peak if peak > 0 else 0.0) * (height - 2 * pad)
        return round(x, 1), round(y, 1)

    runs: list[list[tuple[float, float]]] = [[]]
    for i, v in enumerate(values):
        if v is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(point(i, v))
    segments = [" ".join(f"{x},{y}" for x, y in run) for run in runs if len(run) > 1]
    # A lone value between gaps has no line to sit on; it still deserves to be seen.
    dots = [run[0] for run in runs if len(run) == 1]
    return Sparkline(width, height, segments, dots, peak, values[-1])


@dataclass(frozen=True)
class Mark:
    """One version on the strip: where it sits, how bad it looked, and where it links."""

    x: float
    version: int
    trigger: str
    severity: str
    title: str


@dataclass(frozen=True)
class Strip:
    width: int
    height: int
    marks: list[Mark]


def worst(signals: list[Signal]) -> Signal | None:
    return min(signals, key=lambda s: SEVERITY_ORDER[s.severity], default=None)


def strip(
    versions: list[tuple[int, str, list[Signal]]], step: int = 14, max_width: int = 960
) -> Strip:
    """`versions` oldest first as (version, trigger, signals); marks shrink to fit max_width."""
    count = len(versions)
    width = max(120, min(max_width, step * count + 8))
    gap = (width - 12) / (count - 1) if count > 1 else 0.0
    marks = []
    for i, (version, trigger, signals) in enumerate(versions):
        bad = worst(signals)
        severity = bad.severity if bad else "ok"
        title = f"v{version} · {trigger} · " + (bad.text if bad else "nothing stands out")
        x = 6 + i * gap if count > 1 else width / 2
        marks.append(Mark(round(x, 1), version, trigger, severity, title))
    return Strip(width, 30, marks)
