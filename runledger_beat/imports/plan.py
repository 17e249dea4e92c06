"""Apply schedules read from another scheduler's store: each is created, updated, left unchanged or refused.

The outcome of every schedule is found first without writing (``api.planned``); a dry run stops there. A
schedule of the same name that came from the app's ``beat_schedule`` (source 'config') is refused: sync owns
it. Without ``skip_invalid`` one refusal writes nothing; with it the others are written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .. import api
from ..db.schedule_store import ScheduleStore
from ..errors import ScheduleError
from .celery_schedules import Refused

OUTCOMES = ("created", "updated", "unchanged")


@dataclass(frozen=True)
class Candidate:
    """One schedule read from a source: its validated columns, or why it cannot be imported."""

    name: str
    cols: dict[str, Any] | None = None
    refused: str | None = None


def candidate(name: str, build: Callable[[], dict[str, Any]]) -> Candidate:
    """The Candidate of ``build()`` (the columns); a Refused or ScheduleError becomes its reason."""
    try:
        return Candidate(name, cols=build())
    except Refused as exc:
        return Candidate(name, refused=exc.reason)
    except ScheduleError as exc:
        return Candidate(name, refused=f"{exc.field}: {exc.reason}")


def apply(conn: Any, candidates: Iterable[Candidate], *, dry_run: bool, skip_invalid: bool) -> dict[str, Any]:
    """Plan, then (unless ``dry_run``, or a refusal without ``skip_invalid``) write; returns the report.

    Report: {"created": [name], "updated": [name], "unchanged": [name], "refused": {name: reason},
    "dry_run": bool, "written": bool}.
    """
    report: dict[str, Any] = {**{o: [] for o in OUTCOMES}, "refused": {}, "dry_run": dry_run, "written": False}
    store = ScheduleStore(conn)
    todo = []
    with conn.transaction():
        for c in candidates:
            existing = store.schedule(c.name) if c.cols is not None else None
            if c.cols is None:
                report["refused"][c.name] = c.refused
            elif existing is not None and existing["source"] == "config":
                report["refused"][c.name] = "a schedule of that name comes from the app's beat_schedule; left alone"
            else:
                outcome = api.planned(store, c.cols)
                report[outcome].append(c.name)
                if outcome != "unchanged":
                    todo.append(c.cols)
        if dry_run or (report["refused"] and not skip_invalid):
            return report
        for cols in todo:
            api.save(store, cols)
    report["written"] = bool(todo)
    return report


def summary(report: dict[str, Any]) -> str:
    """The report as text: a count line, then one line per schedule and what happens to it."""
    head = "dry run: " if report["dry_run"] else ""
    lines = [head + ", ".join(f"{o}={len(report[o])}" for o in OUTCOMES) + f", refused={len(report['refused'])}"]
    lines += [f"{o}: {name}" for o in OUTCOMES for name in report[o]]
    lines += [f"refused: {name}: {why}" for name, why in report["refused"].items()]
    if report["refused"] and not report["dry_run"] and not report["written"] and (report["created"] or
                                                                                   report["updated"]):
        lines.append("nothing written: an entry was refused (--skip-invalid imports the others)")
    return "\n".join(lines)
