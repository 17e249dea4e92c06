"""The reference pages stay true to the code, and the README stays a front door (no services needed).

Everything is found through public import paths (runledger_beat.cli, .settings, .api) and the metrics module is
located by name, so the checks hold wherever the modules live inside the package.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
from pathlib import Path

from runledger_beat import api, settings
from runledger_beat.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README_LIMIT = 30_000
#: prometheus_client classes whose first argument is a metric name; a Counter is exposed with "_total".
METRIC_CLASSES = {"Counter": "_total", "Gauge": "", "Histogram": "", "Summary": "", "Info": "_info", "Enum": ""}


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _headings(text: str) -> str:
    """Only the page's heading lines: a name must have a section of its own, not a passing mention."""
    return "\n".join(line for line in text.splitlines() if line.startswith("#"))


def _table_keys(text: str) -> set[str]:
    """The code span opening each markdown table row, without a {label} part: `runledger_x` -> runledger_x."""
    return {m.group(1) for m in re.finditer(r"^\| `([A-Za-z0-9_]+)(?:\{[^}`]*\})?` \|", text, re.M)}


def subcommands() -> list[str]:
    """Every `runledger-beat` subcommand of the parser."""
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(action.choices)


def metrics_source() -> Path:
    """The file defining the Prometheus metrics (runledger_beat.beat.metrics)."""
    for name in ("runledger_beat.beat.metrics",):
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # the parent package does not exist in this layout
            spec = None
        if spec is not None and spec.origin:
            return Path(spec.origin)
    raise AssertionError("no metrics module runledger_beat.beat.metrics")


def metric_names(source: Path) -> set[str]:
    """Exposed names of the metrics the module constructs (Counter("x", ...) is exposed as x_total)."""
    found = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        first = node.args[0]
        if func in METRIC_CLASSES and isinstance(first, ast.Constant) and isinstance(first.value, str):
            suffix = METRIC_CLASSES[func]
            found.add(first.value if not suffix or first.value.endswith(suffix) else first.value + suffix)
    return found


def test_every_subcommand_has_a_section_in_the_cli_reference():
    commands = subcommands()
    assert len(commands) >= 20 and "add" in commands and "migrate" in commands
    headings = _headings(_page("reference/cli.md"))
    missing = [c for c in commands if f"`runledger-beat {c}`" not in headings]
    assert not missing, f"docs/reference/cli.md has no section for: {', '.join(missing)}"


def test_every_setting_is_in_the_settings_reference_and_the_readme():
    names = set(settings.DEFAULTS) | {"runledger_dsn"}
    assert len(names) >= 15 and all(n.startswith("runledger_") for n in names)
    for where, text in (("docs/reference/settings.md", _page("reference/settings.md")),
                        ("README.md", (ROOT / "README.md").read_text(encoding="utf-8"))):
        missing = sorted(names - _table_keys(text))
        assert not missing, f"{where} has no table row for: {', '.join(missing)}"


def test_every_public_api_name_has_a_section_in_the_api_reference():
    assert "create" in api.__all__ and "ScheduleError" in api.__all__
    headings = _headings(_page("reference/api.md"))
    missing = [n for n in api.__all__ if not re.search(rf"`{re.escape(n)}`", headings)]
    assert not missing, f"docs/reference/api.md has no section for: {', '.join(missing)}"


def test_every_metric_is_in_the_metrics_reference():
    names = metric_names(metrics_source())
    assert {"runledger_fires_total", "runledger_due_schedules"} <= names
    missing = sorted(names - _table_keys(_page("reference/metrics.md")))
    assert not missing, f"docs/reference/metrics.md has no table row for: {', '.join(missing)}"


def test_the_readme_is_a_front_door_of_at_most_30000_characters():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme) <= README_LIMIT, f"README.md has {len(readme):,} characters (at most {README_LIMIT:,})"
    top = readme[:1500]
    assert "bash scripts/demo" in top and "bash scripts/test" in top


def test_table_keys_reads_the_name_of_each_row_with_or_without_labels():
    text = "| metric | type |\n|---|---|\n| `runledger_fires_total{outcome}` | counter |\n| `runledger_x` | gauge |\n"
    assert _table_keys(text) == {"runledger_fires_total", "runledger_x"}
