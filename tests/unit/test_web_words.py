"""What the dashboard's pages show, computed without a server: timing in words, durations, the lag plot."""

from __future__ import annotations

from datetime import datetime, timezone

from runledger_beat.ops import pages, web


def test_timing_words_lag_plot_and_helpers():
    assert pages.timing_words({"cron": "0 2 * * *", "timezone": "Europe/Paris"}) == "cron 0 2 * * * (Europe/Paris)"
    assert pages.timing_words({"cron": None, "every": 30.0, "timezone": "UTC"}) == "every 30 s"
    assert pages.timing_words({"cron": None, "every": 300.0}) == "every 5 min"
    assert pages.timing_words({"cron": None, "every": 7200.0}) == "every 2 h"
    assert pages.timing_words({"cron": None, "every": 90.0}) == "every 90 s"
    assert pages.timing_words({"cron": None, "every": 0.5}) == "every 0.5 s"
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert pages.timing_words({"cron": None, "every": None, "at": at}) == "once at 2030-01-02T03:04:05Z"
    assert pages.seconds_words(0.012) == "12 ms" and pages.seconds_words(2.5) == "2.500 s"
    assert pages.seconds_words(200) == "3 min 20 s" and pages.seconds_words(None) == "-"
    plot = pages.lag_plot([{"lag_seconds": v} for v in (0.01, 0.02, 0.5, 0.0)])
    assert plot["count"] == 4 and len(plot["points"].split()) == 4 and plot["max"] == 0.5
    assert pages.lag_plot([])["count"] == 0
    assert web.safe_next("/schedules/x") == "/schedules/x"
    assert web.safe_next("//evil.example") == "/" and web.safe_next("https://evil.example") == "/"
    assert web.session_secret("a") != web.session_secret("b")
