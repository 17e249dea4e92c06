"""What the dashboard's pages show, computed without I/O: a timing in words, a lag or duration in words, a
schedule's page address, and the lag plot's points."""

from __future__ import annotations

import math
from urllib.parse import quote

from ..timing.formats import format_rfc3339


def _amount(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def every_words(seconds: float) -> str:
    """'30 s', '5 min', '2 h', '1 d', '90 s', '0.5 s'."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{_amount(seconds)} s"


def timing_words(s: dict) -> str:
    """A schedule's timing in words: 'every 30 s', 'cron 0 2 * * * (Europe/Paris)', 'once at …'."""
    if s.get("cron"):
        day_and = ", day AND" if s.get("day_and") else ""
        return f"cron {s['cron']} ({s['timezone']}{day_and})"
    if s.get("every") is not None:
        return f"every {every_words(float(s['every']))}"
    if s.get("at"):
        return f"once at {format_rfc3339(s['at'])}"
    return "-"


def seconds_words(value: float | None) -> str:
    """A lag or a duration: '12 ms', '1.250 s', '3 min 20 s', '-' when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) < 1:
        return f"{value * 1000:.0f} ms"
    if abs(value) < 120:
        return f"{value:.3f} s"
    minutes, rest = divmod(int(round(value)), 60)
    return f"{minutes} min {rest} s"


def duration(job: dict) -> float | None:
    """finished_at - started_at in seconds, None unless both are known."""
    if job.get("started_at") and job.get("finished_at"):
        return (job["finished_at"] - job["started_at"]).total_seconds()
    return None


def lag_plot(series: list[dict], width: int = 640, height: int = 160, pad: int = 28) -> dict:
    """The SVG polyline of lag_seconds over the fires: {"points", "count", "max", "min", "width", "height", ...}."""
    lags = [float(r["lag_seconds"]) for r in series if r.get("lag_seconds") is not None]
    out = {"width": width, "height": height, "pad": pad, "count": len(lags), "points": "",
           "max": max(lags, default=0.0), "min": min(lags, default=0.0)}
    if not lags:
        return out
    top, bottom = max(max(lags), 0.001), min(min(lags), 0.0)
    span = top - bottom
    step = (width - 2 * pad) / max(len(lags) - 1, 1)
    points = []
    for i, lag in enumerate(lags):
        x = pad + i * step
        y = height - pad - (lag - bottom) / span * (height - 2 * pad)
        points.append(f"{x:.1f},{y:.1f}")
    out.update(points=" ".join(points), top=top, bottom=bottom,
               zero_y=round(height - pad - (0 - bottom) / span * (height - 2 * pad), 1))
    return out


def schedule_path(name: str) -> str:
    """The page of schedule ``name`` (every character but letters, digits and _.-~ percent-encoded)."""
    return "/schedules/" + quote(name, safe="")
