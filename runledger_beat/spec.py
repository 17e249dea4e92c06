"""One schedule definition and its validation: ``ScheduleSpec``.

The API, the command line, the beat_schedule importer and the web dashboard all
describe a schedule with a ``ScheduleSpec`` and turn it into table columns with
``columns()``, which checks every field first and raises ``ScheduleError(field,
reason)``, so nothing invalid is ever written. The CHECK constraints of the
migrations guard the same rules for raw SQL (limits.py holds the shared bounds).

Text is checked here too, for every interface: names, tasks, notes, calendar
names, option strings and every string in args, kwargs and headers (keys and
values, at any depth) refuse a NUL (Postgres cannot store it), a lone surrogate
(not Unicode text; UTF-8 cannot encode it) and the invisible format characters
of Unicode category Cf (bidi controls such as U+202E, zero-width spaces and
joiners, the byte order mark, soft hyphens, tag characters), which make a name
or a value look like another on screen. That includes the zero-width joiner of
emoji sequences: send such text escaped or encoded. JSON integers stay within 64
bits, and ``parse_json`` turns every failure of JSON text (syntax, invalid
UTF-8, nesting beyond Python's recursion limit, integers of more than 4,300
digits) into a ``ScheduleError`` naming the field.
"""

from __future__ import annotations

import json
import math
import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import date, datetime, timedelta
from typing import Any

from .db.loaders import is_out_of_range, is_unreadable
from .errors import ScheduleError
from .payload import template_problem
from .timing.cron import zone
from .timing.engine import Timing
from .timing.formats import parse_duration, parse_instant
from .timing.limits import (
    INSTANT_COLUMNS,
    MAX_CRON_LEN,
    MAX_INSTANT,
    MAX_JSON_DEPTH,
    MAX_JSON_INT,
    MAX_NAME_LEN,
    MAX_OPTION_STRING_LEN,
    MAX_PRIORITY,
    MAX_SECONDS,
    MAX_TASK_LEN,
    MAX_TEMPLATE_BYTES,
    MAX_TZ_LEN,
    MIN_INSTANT,
    MIN_JSON_INT,
    MIN_PRIORITY,
    OPTION_KEYS,
    PROTOCOL_HEADERS,
    SECONDS_OPTIONS,
    STRING_OPTIONS,
)

OVERLAP_POLICIES = ("allow", "skip", "buffer_one", "cancel_other")
SOURCES = ("api", "config")
#: Longest pause note (the column's CHECK says the same).
MAX_NOTE_LEN = 2000
#: Most skip dates a schedule or calendar holds (the columns' CHECK says the same).
MAX_SKIP_DATES = 10000
#: Columns whose change moves the cursor.
TIMING_COLUMNS = ("kind", "cron_expr", "cron_day_and", "interval_seconds", "run_at", "timezone",
                  "max_jitter_seconds", "start_at", "end_at", "skip_dates", "calendar")


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule as users write it (API keyword names); ``columns()`` validates it."""

    name: Any
    task: Any
    cron: Any = None
    every: Any = None
    at: Any = None
    timezone: Any = "UTC"
    args: Any = ()
    kwargs: Any = None
    options: Any = None
    max_jitter: Any = 0
    misfire: Any = "fire_once"
    grace: Any = None
    overlap: Any = "allow"
    start: Any = None
    end: Any = None
    organization_id: Any = None
    active: Any = True
    day_and: Any = False
    source: Any = "api"
    skip_dates: Any = ()
    calendar: Any = None
    overlap_terminate: Any = False

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Every field, in declaration order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ScheduleSpec:
        """The spec of a stored job_schedules row."""
        template = row["payload_template"]
        args, kwargs = ((template.get("args", []), template.get("kwargs", {}))
                        if isinstance(template, dict) else ([template], {}))
        options = row.get("options")
        kind = row["kind"]
        return cls(
            name=row["name"], task=row["job_type"], cron=row.get("cron_expr") if kind == "cron" else None,
            every=row.get("interval_seconds") if kind == "interval" else None,
            at=row.get("run_at") if kind == "once" else None, timezone=row["timezone"], args=args, kwargs=kwargs,
            options=dict(options) if isinstance(options, dict) else options, max_jitter=row["max_jitter_seconds"],
            misfire=row["misfire_policy"], grace=row.get("misfire_grace_seconds"), overlap=row["overlap_policy"],
            start=row.get("start_at"), end=row.get("end_at"),
            organization_id=str(row["organization_id"]) if row.get("organization_id") else None,
            active=row["is_active"], day_and=bool(row.get("cron_day_and")), source=row["source"],
            skip_dates=sorted(row.get("skip_dates") or ()), calendar=row.get("calendar"),
            overlap_terminate=bool(row.get("overlap_terminate")))

    def columns(self) -> dict[str, Any]:
        """Validate every field into job_schedules column values (no id, anchor or cursor yet)."""
        name = check_text("name", self.name, MAX_NAME_LEN)
        task = check_text("task", self.task.strip() if isinstance(self.task, str) else self.task, MAX_TASK_LEN)
        template = check_template(self.args, self.kwargs)
        check_choice("overlap", self.overlap, OVERLAP_POLICIES)
        check_choice("source", self.source, SOURCES)
        timing = self.timing()
        kind = timing.kind
        return {
            "name": name, "job_type": task, "organization_id": check_organization(self.organization_id),
            "payload_template": template, "kind": kind, "cron_expr": timing.cron,
            "cron_day_and": timing.day_and if kind == "cron" else False, "interval_seconds": timing.every,
            "run_at": timing.at, "timezone": timing.timezone, "is_active": bool(self.active),
            "max_jitter_seconds": timing.max_jitter, "options": check_options(self.options),
            "misfire_policy": timing.misfire, "misfire_grace_seconds": timing.grace,
            "overlap_policy": self.overlap, "start_at": timing.start, "end_at": timing.end, "source": self.source,
            "skip_dates": sorted(timing.skip_dates), "calendar": check_calendar_name(self.calendar),
            "overlap_terminate": check_bool("overlap_terminate", self.overlap_terminate),
        }

    def timing(self) -> Timing:
        """The validated Timing of this spec (kind from whichever of cron / every / at is given)."""
        given = [k for k, v in (("cron", self.cron), ("every", self.every), ("at", self.at)) if v is not None]
        if len(given) != 1:
            raise ScheduleError("cron", "give exactly one of cron, every or at"
                                + (f" (got {', '.join(given)})" if given else ""))
        tz = self.timezone
        if not isinstance(tz, str) or not tz or len(tz) > MAX_TZ_LEN:
            raise ScheduleError("timezone", f"unknown time zone {tz!r}")
        zone(tz)
        kind = {"cron": "cron", "every": "interval", "at": "once"}[given[0]]
        skip_dates = check_skip_dates(self.skip_dates)
        if kind == "once" and (skip_dates or self.calendar):
            raise ScheduleError("skip_dates", "a one-off (at) schedule has no dates to skip; move its instant instead")
        cron = None
        if kind == "cron":
            if not isinstance(self.cron, str) or len(self.cron) > MAX_CRON_LEN:
                raise ScheduleError("cron", f"must be a string of at most {MAX_CRON_LEN} characters")
            cron = self.cron.strip()
        return Timing(
            kind=kind, cron=cron, day_and=bool(self.day_and),
            every=check_seconds("every", self.every) if kind == "interval" else None,
            at=check_instant("at", self.at, tz), timezone=tz,
            start=check_instant("start", self.start, tz), end=check_instant("end", self.end, tz),
            max_jitter=self.max_jitter, misfire=self.misfire, grace=check_seconds("grace", self.grace),
            skip_dates=skip_dates,
        ).validate()


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error message: at most ``limit`` characters, and an integer too long to print
    (beyond Python's 4,300 digits) by its size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except ValueError:  # a container holding such an integer
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "..."


def forbidden_character(value: str, format_ok: bool = False) -> str | None:
    """Why ``value`` cannot be stored or shown faithfully: a NUL, a lone surrogate or (unless ``format_ok``) an
    invisible format character (category Cf); None when it holds none."""
    if "\x00" in value:
        return "contains a NUL character"
    if value.isascii():
        return None
    for char in value:
        if char > "\x7f":
            category = unicodedata.category(char)
            if category == "Cs":
                return f"contains a lone surrogate (U+{ord(char):04X}), which is not Unicode text"
            if category == "Cf" and not format_ok:
                name = unicodedata.name(char, "")
                return (f"contains the invisible format character U+{ord(char):04X}{' ' + name if name else ''} "
                        "(bidi controls, zero-width characters and byte order marks disguise text on screen)")
    return None


def check_chars(field: str, value: str, format_ok: bool = False) -> str:
    """``value`` unless it holds a NUL, a lone surrogate or (unless ``format_ok``) a format character."""
    reason = forbidden_character(value, format_ok)
    if reason:
        raise ScheduleError(field, reason)
    return value


def check_lookup(field: str, value: Any) -> str:
    """A name to look a row up by: text Postgres can hold (no NUL, no lone surrogate).

    Names that are merely odd pass, so a row written before these checks (or by raw SQL) stays reachable.
    """
    if not isinstance(value, str):
        raise ScheduleError(field, f"must be a string, got {type(value).__name__}")
    return check_chars(field, value, format_ok=True)


def check_text(field: str, value: Any, limit: int) -> str:
    """A non-empty single-line string without surrounding spaces, control or format characters, at most ``limit``
    long."""
    if not isinstance(value, str) or not value:
        raise ScheduleError(field, "must be a non-empty string")
    if len(value) > limit:
        raise ScheduleError(field, f"at most {limit} characters, got {len(value)}")
    check_chars(field, value)
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        raise ScheduleError(field, f"must not contain control characters: {value!r}")
    if value != value.strip():
        raise ScheduleError(field, f"must not start or end with spaces: {value!r}")
    return value


def check_count(field: str, value: Any, low: int, high: int) -> int:
    """An integer in ``low``..``high`` (a row count, a limit)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ScheduleError(field, f"must be an integer between {low} and {high}, got {shown(value)}")
    return value


def check_instant(field: str, value: Any, tz: str) -> datetime | None:
    """An aware instant (datetime or ISO text; naive means ``tz``) within MIN_INSTANT..MAX_INSTANT."""
    instant = parse_instant(field, value, tz)
    if instant is not None and not MIN_INSTANT <= instant < MAX_INSTANT:
        raise ScheduleError(field, f"must be between {MIN_INSTANT:%Y-%m-%d} and {MAX_INSTANT:%Y-%m-%d}, got {value!r}")
    return instant


def check_choice(field: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ScheduleError(field, f"unknown value {shown(value)}; expected {' or '.join(choices)}")
    return value


def check_seconds(field: str, value: Any) -> float | None:
    """A finite duration in seconds (number, timedelta or text like 5m), 0..MAX_SECONDS; None stays None."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ScheduleError(field, f"expected a duration, got {shown(value)}")
    elif isinstance(value, str):
        seconds = parse_duration(value, field)
    else:
        seconds = float(value) if not isinstance(value, int) or abs(value) <= MAX_SECONDS else math.inf
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_SECONDS:
        raise ScheduleError(field, f"must be a finite number of seconds between 0 and {MAX_SECONDS}, "
                                   f"got {shown(value)}")
    return seconds


def check_skip_dates(value: Any, field: str = "skip_dates") -> frozenset[date]:
    """Local dates: dates or ISO 'YYYY-MM-DD' texts, as a collection or one comma-separated text."""
    if value is None or value == "":
        return frozenset()
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, Mapping) or not isinstance(items, (list, tuple, set, frozenset)):
        raise ScheduleError(field, f"expected dates like 2026-12-25,2026-12-26, got {value!r}")
    found: set[date] = set()
    for item in items:
        if isinstance(item, str):
            try:
                item = date.fromisoformat(item.strip())
            except ValueError:
                raise ScheduleError(field, f"invalid date {item.strip()!r}; expected YYYY-MM-DD") from None
        if not isinstance(item, date) or isinstance(item, datetime):
            raise ScheduleError(field, f"expected a date, got {item!r}")
        found.add(item)
    if len(found) > MAX_SKIP_DATES:
        raise ScheduleError(field, f"at most {MAX_SKIP_DATES} dates, got {len(found)}")
    return frozenset(found)


def check_calendar_name(value: Any) -> str | None:
    """A calendar name, or None (None or "" is no calendar)."""
    if value is None or value == "":
        return None
    return check_text("calendar", value, MAX_NAME_LEN)


def check_bool(field: str, value: Any) -> bool:
    """True or false."""
    if not isinstance(value, bool):
        raise ScheduleError(field, f"must be true or false, got {shown(value)}")
    return value


def check_note(value: Any) -> str | None:
    """A pause note: one line of at most MAX_NOTE_LEN characters, no control or format characters (the
    command line prints it on the schedule's line); None or blank is no note."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ScheduleError("note", f"must be a string, got {type(value).__name__}")
    value = value.strip()
    if len(value) > MAX_NOTE_LEN:
        raise ScheduleError("note", f"at most {MAX_NOTE_LEN} characters, got {len(value)}")
    check_chars("note", value)
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        raise ScheduleError("note", f"must be one line without control characters: {shown(value)}")
    return value or None


def check_organization(value: Any) -> str | None:
    """A UUID as text, or None."""
    if value is None or value == "":
        return None
    try:
        return str(uuid.UUID(value if isinstance(value, str) else str(value)))
    except ValueError:
        raise ScheduleError("organization_id", f"must be a UUID, got {shown(value)}") from None


def check_template(args: Any, kwargs: Any) -> dict[str, Any]:
    """The payload template ``{"args": [...], "kwargs": {...}}``: plain, finite, bounded JSON."""
    if isinstance(args, tuple):
        args = list(args)
    if not isinstance(args, list):
        raise ScheduleError("args", f"must be a list, got {type(args).__name__}")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, Mapping):
        raise ScheduleError("kwargs", f"must be an object, got {type(kwargs).__name__}")
    template = {"args": list(args), "kwargs": dict(kwargs)}
    for field in ("args", "kwargs"):
        check_json(field, template[field])
    if len(json.dumps(template)) > MAX_TEMPLATE_BYTES:
        raise ScheduleError("args", f"args and kwargs together exceed {MAX_TEMPLATE_BYTES} bytes of JSON")
    return template


def parse_json(field: str, text: str | bytes) -> Any:
    """JSON text as Python values; a syntax error, invalid UTF-8, nesting beyond Python's recursion limit or an
    integer of more than 4,300 digits is a ScheduleError naming ``field`` (the values still need ``check_json``)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ScheduleError(field, f"nested too deeply (at most {MAX_JSON_DEPTH} levels)") from None
    except json.JSONDecodeError as exc:
        raise ScheduleError(field, f"not valid JSON ({exc.msg} at character {exc.pos})") from None
    except UnicodeDecodeError:
        raise ScheduleError(field, "not valid JSON (not UTF-8 text)") from None
    except ValueError:  # Python refuses to read integers of more than sys.get_int_max_str_digits() digits
        raise ScheduleError(field, "not valid JSON here: an integer of thousands of digits "
                                   f"(integers must be within {MIN_JSON_INT}..{MAX_JSON_INT})") from None


def check_json(field: str, value: Any) -> None:
    """Plain JSON nested at most MAX_JSON_DEPTH deep: string keys, finite numbers, integers within 64 bits, strings
    without NUL, lone surrogates or format characters. Errors name the place: ``kwargs.user``, ``args[0][2]``."""
    stack: list[tuple[Any, int, tuple]] = [(value, 1, (None, field))]
    while stack:
        item, depth, place = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ScheduleError(field, f"nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, str):
            check_chars(_place(place), item)
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise ScheduleError(_place(place), "object keys must be strings")
                reason = forbidden_character(key)
                if reason:
                    raise ScheduleError(_place(place), f"key {shown(key)}: {reason}")
                stack.append((child, depth + 1, (place, key)))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, depth + 1, (place, index)) for index, child in enumerate(item))
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not MIN_JSON_INT <= item <= MAX_JSON_INT:
                raise ScheduleError(_place(place), f"an integer beyond the 64-bit range {MIN_JSON_INT}..{MAX_JSON_INT} "
                                                   "(jsonb and Celery's consumers cannot carry it)")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ScheduleError(_place(place), f"{item!r} is not valid JSON")
        else:
            raise ScheduleError(_place(place), f"{type(item).__name__} is not JSON (use strings, numbers, lists, "
                                               "objects)")


def _place(place: tuple) -> str:
    """The text of a place in a JSON value: its field, then ``.key`` or ``[index]`` steps (odd keys quoted)."""
    steps = []
    while place[0] is not None:
        place, step = place
        if isinstance(step, int):
            steps.append(f"[{step}]")
        elif step.isprintable() and step and len(step) <= 64:
            steps.append(f".{step}")
        else:
            steps.append(f"[{shown(step, 64)}]")
    return place[1] + "".join(reversed(steps))


def check_options(options: Any) -> dict[str, Any]:
    """Celery publish options: known keys (limits.OPTION_KEYS) with values of the right type."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ScheduleError("options", f"must be an object, got {type(options).__name__}")
    clean: dict[str, Any] = {}
    for key, value in options.items():
        if key not in OPTION_KEYS:
            raise ScheduleError("options", f"unknown option {key!r}; expected one of {', '.join(OPTION_KEYS)}")
        if value is not None:
            clean[key] = _option(key, value)
    return clean


def _option(key: str, value: Any) -> Any:
    """One option's checked value."""
    if key in STRING_OPTIONS:
        if not isinstance(value, str) or not value or len(value) > MAX_OPTION_STRING_LEN:
            raise ScheduleError(key, f"must be a non-empty string of at most {MAX_OPTION_STRING_LEN} characters, "
                                f"got {shown(value)}")
        return check_chars(key, value)
    if key == "priority":
        if isinstance(value, bool) or not isinstance(value, int) or not MIN_PRIORITY <= value <= MAX_PRIORITY:
            raise ScheduleError("priority", f"must be an integer {MIN_PRIORITY}..{MAX_PRIORITY}, got {shown(value)}")
        return value
    if key == "ignore_result":
        return check_bool("ignore_result", value)
    if key == "headers":
        return _headers(value)
    if key not in SECONDS_OPTIONS:
        raise ScheduleError("options", f"unknown option {key!r}")
    seconds = check_seconds(key, value)
    if not seconds:
        raise ScheduleError(key, f"must be a positive number of seconds, got {value!r}")
    return seconds


def _headers(value: Any) -> dict[str, Any]:
    """Extra message headers: plain JSON, never a protocol header."""
    if not isinstance(value, Mapping):
        raise ScheduleError("headers", f"must be an object, got {shown(value)}")
    reserved = sorted(k for k in value if k in PROTOCOL_HEADERS)
    if reserved:
        raise ScheduleError("headers", f"may not set protocol headers: {', '.join(reserved)}")
    check_json("headers", dict(value))
    return dict(value)


def check_row(row: dict[str, Any]) -> None:
    """Refuse values no valid schedule holds (written by raw SQL before the constraints), naming the column."""
    if "bad_instant" in row:  # the claim statement judged the instants in SQL
        if row["bad_instant"]:
            raise ScheduleError(row["bad_instant"], "not a finite date-time within year 1..9999")
    else:
        for column in INSTANT_COLUMNS:
            if is_out_of_range(row.get(column)):
                raise ScheduleError(column, "not a finite date-time within year 1..9999")
    for column in ("payload_template", "options"):
        if is_unreadable(row.get(column)):
            raise ScheduleError(column, str(row[column]))
    if not isinstance(row.get("options") or {}, dict):
        raise ScheduleError("options", "must be a JSON object")
    problem = template_problem(row.get("payload_template"))
    if problem:
        raise ScheduleError("payload_template", problem)
