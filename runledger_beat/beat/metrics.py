"""Prometheus metrics of one beat, served at ``/metrics`` when ``runledger_metrics_port`` is set.

The fire pipeline calls a small interface (``fired``, ``lag``, ``publish_failed``,
``ticked``, ``gauges``) and asks ``enabled`` before doing any work of its own
for metrics; without a port it holds ``NoMetrics``, whose methods do nothing,
so the hot path pays a no-op call per batch at most. With a port,
``PrometheusMetrics`` keeps its own registry (never the process-global one) and
serves it with prometheus-client's ``start_http_server`` on
``runledger_metrics_host`` (default 127.0.0.1). No metric has a per-schedule
label: thousands of schedules must not mean thousands of series.

Metrics:

- ``runledger_fires_total{outcome}``: fires by outcome: ``sent`` (the broker
  confirmed), ``skipped`` (misfire or overlap policy), ``failed`` (a publish
  failed; the fire stays pending and is retried), ``deferred`` (a schedule that
  could not be planned or recorded was pushed out).
- ``runledger_fire_lag_seconds``: histogram of scheduled_for to broker confirm,
  on the database clock.
- ``runledger_publish_failures_total``: failed publish attempts (one per
  outage or refusal met, however many fires it held up).
- ``runledger_due_schedules``, ``runledger_pending_fires``,
  ``runledger_quarantined_schedules``: gauges read from the database (one
  cheap statement at most every GAUGE_REFRESH seconds).
- ``runledger_publish_backlog``: fires this beat has committed and holds to publish later: spread under
  ``runledger_max_fires_per_second``, waiting for their instant, or stopped by a broker outage.
- ``runledger_last_tick_timestamp_seconds``: when this beat last did a round of work.
- ``runledger_build_info{version}``: always 1; ``version`` is ``runledger_beat.__version__``, as
  ``runledger-beat --version`` and the ``beats`` table show it.

prometheus-client is the ``metrics`` extra: ``settings.load`` refuses a ``runledger_metrics_port``
without it (beat exits at start with one line), so it is imported here only once a port is set.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from ..version import __version__

log = logging.getLogger(__name__)

#: Seconds between refreshes of the gauges read from the database.
GAUGE_REFRESH = 5.0
#: Fire lag buckets (seconds): milliseconds when all is well, minutes to an hour after outages.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
OUTCOMES = ("sent", "skipped", "failed", "deferred")


class NoMetrics:
    """Metrics switched off: every call is a no-op."""

    enabled = False
    port: int | None = None

    def fired(self, outcome: str, n: int = 1) -> None:
        """Count ``n`` fires of an outcome (see OUTCOMES)."""

    def lag(self, seconds: float) -> None:
        """Observe one fire's lag from its instant to the broker's confirm."""

    def publish_failed(self) -> None:
        """Count a failed publish attempt."""

    def ticked(self) -> None:
        """This beat did a round of work."""

    def gauges(self, due: int, pending: int, quarantined: int) -> None:
        """Set the gauges read from the database."""

    def backlog(self, n: int) -> None:
        """Set how many committed fires this beat holds to publish later."""

    def close(self) -> None:
        """Stop serving."""


class PrometheusMetrics(NoMetrics):
    """The metrics on a registry of their own, served over HTTP at /metrics (see the module docstring)."""

    enabled = True

    def __init__(self, host: str, port: int) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

        self.registry = CollectorRegistry(auto_describe=True)
        self._fires = Counter("runledger_fires", "Fires by outcome: sent, skipped, failed, deferred.",
                              ["outcome"], registry=self.registry)
        for outcome in OUTCOMES:
            self._fires.labels(outcome)  # every series present from the start, at 0
        self._lag = Histogram("runledger_fire_lag_seconds", "Seconds from a fire's instant to the broker's confirm.",
                              buckets=LAG_BUCKETS, registry=self.registry)
        self._publish_failures = Counter("runledger_publish_failures", "Publish attempts that failed.",
                                         registry=self.registry)
        self._due = Gauge("runledger_due_schedules", "Active schedules whose cursor is due now.",
                          registry=self.registry)
        self._pending = Gauge("runledger_pending_fires", "Ledger rows recorded but not yet published.",
                              registry=self.registry)
        self._quarantined = Gauge("runledger_quarantined_schedules", "Schedules quarantined after repeated "
                                  "failures.", registry=self.registry)
        self._backlog = Gauge("runledger_publish_backlog", "Fires committed and held by this beat to publish later "
                              "(spread under runledger_max_fires_per_second, waiting for their instant, or stopped "
                              "by a broker outage).", registry=self.registry)
        self._last_tick = Gauge("runledger_last_tick_timestamp_seconds", "Unix time of this beat's last round "
                                "of work.", registry=self.registry)
        Gauge("runledger_build_info", "Always 1; the label is the runledger_beat version.", ["version"],
              registry=self.registry).labels(__version__).set(1)
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        self.port = self._server.server_port

    def fired(self, outcome: str, n: int = 1) -> None:
        if n:
            self._fires.labels(outcome).inc(n)

    def lag(self, seconds: float) -> None:
        self._lag.observe(max(0.0, seconds))

    def publish_failed(self) -> None:
        self._publish_failures.inc()

    def ticked(self) -> None:
        self._last_tick.set_to_current_time()

    def gauges(self, due: int, pending: int, quarantined: int) -> None:
        self._due.set(due)
        self._pending.set(pending)
        self._quarantined.set(quarantined)

    def backlog(self, n: int) -> None:
        self._backlog.set(n)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._server.shutdown()
            self._server.server_close()


def from_settings(settings: Any) -> NoMetrics:
    """PrometheusMetrics when ``runledger_metrics_port`` is set (None is off), else NoMetrics.

    A port that cannot be bound (another beat on this host has it) is logged and
    metrics stay off: a beat never stops scheduling over its metrics.
    """
    port = getattr(settings, "metrics_port", None)
    if port is None:
        return NoMetrics()
    host = getattr(settings, "metrics_host", "127.0.0.1")
    try:
        metrics = PrometheusMetrics(host, port)
    except OSError as exc:
        log.error("runledger: cannot serve metrics on %s:%s (%s); metrics are off for this beat", host, port, exc)
        return NoMetrics()
    log.info("runledger: metrics at http://%s:%s/metrics", host, metrics.port)
    return metrics
