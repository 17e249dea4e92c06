"""The chaos soak's checker: the ledger and every delivery the workers saw, against every slot that was due.

For each schedule of the soak (every-second, every-minute, the minute's burst) it lists the slots due between
the soak's start and end. A slot belongs to the fault whose window holds it (from the injection to ``SETTLE``
seconds after recovery). For each fault kind it reports: faults injected; slots due; slots recorded once;
slots missing; slots coalesced (missed while no beat could fire the schedule, as in a database outage: the
``fire_once`` misfire policy records the first of them late and moves the cursor past the rest, by design);
messages published twice (two messages with one task id reached workers); messages the broker redelivered (one
message again after a lost connection: at-least-once delivery); tasks executed twice (one task id's body run
twice); ledger rows never executed; the max lag after recovery (a fire's ``sent_at``, or its ``started_at`` when a
worker took it before beat marked it, after the later of its instant and the recovery).

The run fails (``ok`` false, exit status 1) on any slot recorded twice, missing and not coalesced, any
task executed twice, any recorded fire never executed, or any execution without its ledger row.

    .venv/bin/python bench/chaos_check.py run.json     # a run kept with bench/chaos.py --keep
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

#: Seconds after a fault's recovery its window still runs (catch-up and re-balancing belong to the fault).
SETTLE = 30.0
#: Kinds in the order of the table.
KINDS = ("beat_kill", "beat_stop", "partition", "pg_restart", "failover", "rabbit_stop", "rabbit_restart",
         "redis_restart")


def due_slots(first: datetime, step: timedelta, end: datetime) -> list[datetime]:
    """Every instant from ``first`` every ``step`` before ``end``."""
    slots, at = [], first
    while at < end:
        slots.append(at)
        at += step
    return slots


def _window_of(at: datetime, faults: list[dict]) -> dict | None:
    """The latest fault whose window holds ``at``."""
    found = None
    for fault in faults:
        if fault["start"] <= at < fault["recovered"] + timedelta(seconds=SETTLE):
            found = fault
    return found


def _coalesced(at: datetime, recorded: list[dict]) -> bool:
    """Whether the missing slot ``at`` was coalesced by ``fire_once``: the schedule's last fire before it was
    recorded late, once ``at`` was already due (the beat recorded that one missed fire and moved the cursor past
    the rest). A slot missing after a fire recorded on time was lost."""
    before = [job for job in recorded if job["scheduled_for"] < at]
    return bool(before) and max(before, key=lambda job: job["scheduled_for"])["created_at"] >= at


class _Records:
    """What the soak left: schedules, ledger rows (by slot and by schedule), deliveries and runs by task id."""

    def __init__(self, ledger_dsn: str, record_dsn: str, schema: str) -> None:
        with psycopg.connect(ledger_dsn, row_factory=dict_row) as conn:
            self.schedules = conn.execute(f'SELECT id, name FROM "{schema}".job_schedules').fetchall()
            # A worker may start a fire before beat marks it sent (the mark then leaves it): its start bounds
            # when it was published.
            self.jobs = conn.execute("SELECT id, schedule_id, scheduled_for, status, created_at,"
                                     " coalesce(sent_at, started_at) AS out_at"
                                     f' FROM "{schema}".jobs').fetchall()
        with psycopg.connect(record_dsn) as conn:
            rows = conn.execute("SELECT task_id, redelivered FROM deliveries").fetchall()
            self.published = Counter(task_id for task_id, again in rows if not again)
            self.redelivered = Counter(task_id for task_id, again in rows if again)
            self.executions = Counter(r[0] for r in conn.execute("SELECT task_id FROM executions"))
        self.per_slot: dict[tuple, list[dict]] = {}
        self.per_schedule: dict[Any, list[dict]] = {}
        for job in self.jobs:
            self.per_slot.setdefault((job["schedule_id"], job["scheduled_for"]), []).append(job)
            self.per_schedule.setdefault(job["schedule_id"], []).append(job)


def _count_slots(records: _Records, run: dict[str, Any], rows: dict[str, Counter], problems: list[str]) -> None:
    """Slots due, recorded once or twice, coalesced or missing, by fault kind."""
    firsts = {kind: (first, timedelta(seconds=step)) for kind, (first, step) in run["kinds"].items()}
    for schedule in records.schedules:
        first, step = firsts[schedule["name"].split("-")[0]]
        for at in due_slots(first, step, run["end"]):
            fault = _window_of(at, run["faults"])
            row = rows[fault["kind"] if fault else "none"]
            row["due"] += 1
            found = records.per_slot.get((schedule["id"], at), [])
            if len(found) == 1:
                row["once"] += 1
            elif len(found) > 1:
                row["recorded_twice"] += 1
                problems.append(f"{schedule['name']} {at:%H:%M:%S}: {len(found)} ledger rows")
            elif _coalesced(at, records.per_schedule.get(schedule["id"], [])):
                row["coalesced"] += 1
            else:
                row["missing"] += 1
                problems.append(f"{schedule['name']} {at:%H:%M:%S}: missing"
                                f" ({fault['kind'] if fault else 'no fault'})")


def _count_fires(records: _Records, run: dict[str, Any], rows: dict[str, Counter], problems: list[str]) -> dict:
    """Messages published twice, redelivered, runs twice or none, by fault kind; the max lags after recovery."""
    lags: dict[str, float] = {}
    for job in records.jobs:
        if not run["start"] <= job["scheduled_for"] < run["end"]:
            continue
        fault = _window_of(job["scheduled_for"], run["faults"])
        row = rows[fault["kind"] if fault else "none"]
        task_id, when = str(job["id"]), f"{job['scheduled_for']:%H:%M:%S}"
        row["published_twice"] += records.published[task_id] > 1
        row["redelivered"] += records.redelivered[task_id] > 0
        runs = records.executions[task_id]
        if runs > 1:
            row["executed_twice"] += 1
            problems.append(f"{task_id} ({when}) executed {runs} times")
        if runs == 0 and job["status"] != "skipped":
            row["not_executed"] += 1
            problems.append(f"{task_id} ({when}, {job['status']}) never executed")
        if fault and job["out_at"] is not None:
            lag = (job["out_at"] - max(job["scheduled_for"], fault["recovered"])).total_seconds()
            lags[fault["kind"]] = max(lags.get(fault["kind"], 0.0), lag)
    return lags


def check(ledger_dsn: str, record_dsn: str, run: dict[str, Any], schema: str = "runledger") -> dict[str, Any]:
    """Compare the ledger and the deliveries with the slots ``run`` says were due; the report (see the module)."""
    run = dict(run, faults=sorted(run["faults"], key=lambda f: f["start"]))
    records = _Records(ledger_dsn, record_dsn, schema)
    rows = {kind: Counter() for kind in (*KINDS, "none")}
    for fault in run["faults"]:
        rows[fault["kind"]]["faults"] += 1
    problems: list[str] = []
    _count_slots(records, run, rows, problems)
    lags = _count_fires(records, run, rows, problems)
    known = {str(job["id"]) for job in records.jobs}
    strays = [task_id for task_id in records.executions if task_id not in known]
    if strays:
        problems.append(f"{len(strays)} executions without a ledger row, e.g. {strays[0]}")
    table = []
    for kind in (*KINDS, "none"):
        row = rows[kind]
        if kind != "none" and not row["faults"]:
            continue
        table.append({"fault": kind if kind != "none" else "no fault", "faults": row["faults"],
                      **{key: row[key] for key, _ in COLUMNS[2:-1]},
                      "max_lag_s": round(lags[kind], 2) if kind in lags else None})
    return {"ok": not problems, "table": table, "problems": problems[:50], "problem_count": len(problems),
            "stray_executions": len(strays), "ledger_rows": len(records.jobs),
            "executions": sum(records.executions.values())}


COLUMNS = [("fault", "fault kind"), ("faults", "faults injected"), ("due", "slots due"),
           ("once", "slots recorded once"), ("missing", "slots missing"), ("coalesced", "coalesced (fire_once)"),
           ("recorded_twice", "recorded twice"), ("published_twice", "messages published twice"),
           ("redelivered", "redelivered by the broker"),
           ("executed_twice", "tasks executed twice"), ("not_executed", "never executed"),
           ("max_lag_s", "max lag after recovery (s)")]


def markdown(report: dict[str, Any]) -> str:
    """The report's table in Markdown."""
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |",
             "|" + "|".join("---" if key == "fault" else "--:" for key, _ in COLUMNS) + "|"]
    for row in report["table"]:
        lines.append("| " + " | ".join("–" if row[key] is None else str(row[key]) for key, _ in COLUMNS) + " |")
    return "\n".join(lines)


def _decode(run: dict[str, Any]) -> dict[str, Any]:
    parse = datetime.fromisoformat
    return {"start": parse(run["start"]), "end": parse(run["end"]),
            "kinds": {k: (parse(first), step) for k, (first, step) in run["kinds"].items()},
            "faults": [dict(f, start=parse(f["start"]), recovered=parse(f["recovered"])) for f in run["faults"]],
            "ledger_dsn": run["ledger_dsn"], "record_dsn": run["record_dsn"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="the run file bench/chaos.py --keep wrote")
    args = parser.parse_args(argv)
    with open(args.run) as handle:
        run = _decode(json.load(handle))
    report = check(run["ledger_dsn"], run["record_dsn"], run)
    print(markdown(report))
    for problem in report["problems"]:
        print("problem:", problem)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
