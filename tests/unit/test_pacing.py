"""The pacer spreads fires under runledger_max_fires_per_second: never more than the cap in a second, in order."""

from __future__ import annotations

import bisect

import pytest

from runledger_beat.beat.pacing import PACE_STEP, Pacer
from runledger_beat.errors import ConfigError
from runledger_beat.settings import load


def _most_in_one_second(times: list[float]) -> int:
    return max(bisect.bisect_left(times, t + 1.0) - i for i, t in enumerate(times))


def test_a_big_instant_goes_out_in_steps_never_more_than_the_cap_in_a_second():
    times = Pacer(2000).times([100.0] * 10_000)
    assert times == sorted(times)
    assert times[0] == 100.0 and times[-1] == pytest.approx(105.0)  # 10,000 at 2,000/s: five seconds
    assert _most_in_one_second(times) <= 2000
    assert len(set(times)) == 101  # the first fire at once, then one step every PACE_STEP s
    assert times[1] - times[0] == pytest.approx(PACE_STEP)


def test_a_later_instant_waits_behind_the_backlog_and_a_quiet_one_goes_at_once():
    pacer = Pacer(10)
    first = pacer.times([0.0] * 20)      # two seconds' worth at 10/s
    behind = pacer.times([1.0])          # due at 1 s, but 20 fires are ahead of it
    assert behind[0] >= first[-1] and behind[0] == pytest.approx(2.0)
    assert pacer.times([50.0]) == [50.0]  # nothing waits any more: at its instant


def test_the_setting_is_off_by_default_and_checked():
    conf = {"runledger_dsn": "postgresql://x@localhost/db"}
    assert load(conf).max_fires_per_second is None
    assert load(dict(conf, runledger_max_fires_per_second=0)).max_fires_per_second is None
    assert load(dict(conf, runledger_max_fires_per_second=500)).max_fires_per_second == 500.0
    for bad in (0.5, -1, "fast"):
        with pytest.raises(ConfigError, match="runledger_max_fires_per_second"):
            load(dict(conf, runledger_max_fires_per_second=bad))
