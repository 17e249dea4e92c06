"""The chaos soak in short (bench/chaos.py): two real beats and a hooked worker, each fault kind once.

SIGKILL of a beat, SIGSTOP of a beat, a partition between a beat and Postgres, a Postgres restart, a RabbitMQ
stop and a failover to the synchronous standby, on private services, under every-second and every-minute
schedules and a burst each minute. The checker (bench/chaos_check.py) must find every slot recorded once or
coalesced by the misfire policy, none missing, none executed twice, every fire executed. The soak of record runs
for 30 minutes (docs/reliability.md).
"""

from __future__ import annotations

import pytest

from bench.chaos import KINDS, parser, soak
from bench.chaos_check import markdown

from ..support.services import session_database

pytestmark = pytest.mark.slow(seconds=85)

#: Seed 12 orders the faults RabbitMQ stop, beat stop, beat kill, partition, Postgres restart, failover: the
#: worker hook lets a redelivered task run when it cannot read the ledger, so a redelivery (after the broker's
#: return) inside a Postgres outage can run twice (docs/reliability.md); here the Postgres faults come three faults
#: after the broker's, when its redeliveries are long done, on a loaded machine too.
SHORT = ["--minutes", "1", "--beats", "2", "--workers", "1", "--concurrency", "3", "--every-second", "3",
         "--every-minute", "3", "--burst", "200", "--once", "--failover-last", "--gap", "2", "3",
         "--stop-seconds", "8", "--partition-seconds", "8", "--broker-seconds", "6", "6", "--restart-after", "1",
         "--lead", "6", "--warmup", "4", "--tail", "12", "--drain", "60", "--seed", "12"]


def test_each_fault_once_loses_and_doubles_nothing(pg_dsn):
    # The record of runs goes to a database dropped with the session's: a drop now would force a checkpoint in the
    # middle of the other tests.
    report = soak(parser().parse_args([*SHORT, "--record-dsn", session_database(pg_dsn, "chaos")]))
    table = markdown(report)
    print(table)
    assert report["ok"], f"{table}\n{report['problems']}\n{report.get('logs', '')[-6000:]}"
    kinds = {row["fault"]: row for row in report["table"]}
    assert set(kinds) == set(KINDS) | {"no fault"}  # every kind was injected once
    assert all(row["faults"] == 1 for kind, row in kinds.items() if kind != "no fault")
    assert sum(row["due"] for row in report["table"]) > 200  # the burst and the every-second slots were due
    assert all(row["recorded_twice"] == row["executed_twice"] == row["missing"] == 0 for row in report["table"])
