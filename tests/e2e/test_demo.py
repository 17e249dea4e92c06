"""`runledger-beat demo` runs end to end on its embedded Postgres and filesystem broker."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from ..support.procs import ROOT


@pytest.mark.slow(seconds=15)
def test_demo_fires_and_summarises():
    out = subprocess.run([sys.executable, "-m", "runledger_beat.demo", "--seconds", "6"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"sent\s+every-second", out.stdout)
    assert re.search(r"executed\s+every-second", out.stdout)
    summary = out.stdout.split("ledger summary", 1)[1]
    row = re.search(r"every-second\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", summary)
    fires, sent, executed, slots = map(int, row.groups())
    assert fires >= 3 and fires == slots == sent and executed >= sent - 1
