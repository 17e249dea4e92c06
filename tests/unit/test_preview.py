"""`runledger-beat preview` output: table, JSON, and exit code 2 on bad input."""

from __future__ import annotations

import json

import pytest

from runledger_beat.ops.preview import preview_command


def test_json_cron(capsys: pytest.CaptureFixture[str]) -> None:
    code = preview_command(
        ["--cron", "0 9 * * *", "--tz", "Europe/Paris", "--after", "2026-03-28T12:00:00Z", "--count", "3", "--json"]
    )
    assert code == 0
    expected = ["2026-03-29T07:00:00Z", "2026-03-30T07:00:00Z", "2026-03-31T07:00:00Z"]
    assert json.loads(capsys.readouterr().out) == expected


def test_json_interval_with_jitter(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--every", "1h30m", "--after", "2026-01-01T00:00:00Z", "--count", "2", "--json"]
    assert preview_command(args) == 0
    assert json.loads(capsys.readouterr().out) == ["2026-01-01T01:30:00Z", "2026-01-01T03:00:00Z"]
    args = ["--cron", "0 * * * * *", "--after", "2026-05-26T12:00:00Z", "--count", "1", "--jitter", "30",
            "--id", "018fa1f8-0000-7000-8000-000000000123", "--json"]
    assert preview_command(args) == 0
    assert json.loads(capsys.readouterr().out) == ["2026-05-26T12:01:03Z"]


def test_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = preview_command(
        ["--cron", "30 2 * * *", "--tz", "America/New_York", "--after", "2026-03-07T00:00:00Z", "--count", "2"]
    )
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["#", "UTC", "local", "(America/New_York)"]
    assert lines[1].split() == ["1", "2026-03-07T07:30:00Z", "2026-03-07", "02:30:00", "-0500", "EST"]
    assert lines[2].split() == ["2", "2026-03-08T07:00:00Z", "2026-03-08", "03:00:00", "-0400", "EDT"]


def test_one_off(capsys: pytest.CaptureFixture[str]) -> None:
    assert preview_command(["--at", "2026-06-01T10:00:00+02:00", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ["2026-06-01T08:00:00Z"]


def test_default_after_is_now(capsys: pytest.CaptureFixture[str]) -> None:
    assert preview_command(["--every", "5m", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 10


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cron", "0 0 30 2 *"], "error: cron: 0 0 30 2 * can never fire"),
        (["--cron", "x * * * *"], "error: cron: minute: 'x' is not a number"),
        (["--cron", "* * * * *", "--tz", "Mars/Olympus"], "error: timezone: unknown time zone 'Mars/Olympus'"),
        (["--every", "soon"], "error: every: invalid duration 'soon'"),
        (["--cron", "* * * * *", "--id", "nope"], "error: id: invalid UUID 'nope'"),
    ],
)
def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert preview_command(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(message)
    assert captured.out == ""


def test_numeric_options_out_of_range_exit_2_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, option in ((["--cron", "* * * * *", "--jitter", "90000"], "--jitter: must be an integer in 0..86400"),
                         (["--every", "1s", "--count", "100000000"], "--count: must be an integer in 1..10000")):
        assert preview_command(argv) == 2
        captured = capsys.readouterr()
        assert captured.err.splitlines()[-1].endswith(f"error: argument {option}, got '{argv[-1]}'")
        assert captured.out == ""


def test_day_and_shows_celerys_and_of_the_day_fields(capsys: pytest.CaptureFixture[str]) -> None:
    """'0 8 1-7 * 1': cron's OR fires on the 1st-7th and every Monday; --day-and only on the first Monday,
    as a stored Celery crontab does."""
    base = ["--cron", "0 8 1-7 * 1", "--after", "2026-01-01T00:00:00Z", "--count", "3", "--json"]
    assert preview_command(base) == 0
    assert json.loads(capsys.readouterr().out) == ["2026-01-01T08:00:00Z", "2026-01-02T08:00:00Z",
                                                   "2026-01-03T08:00:00Z"]
    assert preview_command([*base, "--day-and"]) == 0
    assert json.loads(capsys.readouterr().out) == ["2026-01-05T08:00:00Z", "2026-02-02T08:00:00Z",
                                                   "2026-03-02T08:00:00Z"]
    assert preview_command(["--every", "5m", "--day-and"]) == 2
    assert "day_and: --day-and applies to --cron only" in capsys.readouterr().err
