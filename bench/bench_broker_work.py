"""Inside RabbitMQ at each boundary of a 10k burst: its work (reductions) and its time (scheduler states).

Runs ``bench_burst.burst`` with three boundaries (the first after beat starts,
then two steady ones) and, around each instant, takes two snapshots inside the
broker and on this machine: 0.2 s before the instant and 2 s after it, so that
nothing samples while the messages flow. Inside the broker (one
``rabbitmqctl eval`` started with beat, sleeping in the broker until each
snapshot): every process's reductions (the work it did, whatever the CPU's
speed) and the schedulers' microstate accounting (``msacc``: time in Erlang
code, in garbage collection, ...). On the machine: every process's CPU time
(/proc). Prints one JSON line per boundary, then first against steady.

Needs ``rabbitmqctl`` for the broker the tests use (on this host) and a /tmp the
broker can write.

    .venv/bin/python bench/bench_broker_work.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import bench_burst  # noqa: E402
from bench.common import cpu_seconds, emit, token  # noqa: E402

BEFORE, AFTER = 0.2, 2.0  # snapshots this long before and after each instant (s)
PERIOD, BOUNDARIES = 20, 3

#: Erlang run in the broker by ``rabbitmqctl eval``: ~INSTANTS~ (ms since the epoch) and ~FILE~ are filled in.
SAMPLER = """
Name = fun(P) -> case proc_lib:translate_initial_call(P) of {M, _, _} -> M; _ -> unknown end end,
Reds = fun() -> maps:from_list([{P, R} || P <- processes(),
                                          {reductions, R} <- [erlang:process_info(P, reductions)]]) end,
Msacc = fun() -> lists:foldl(fun(#{type := Ty, counters := C}, Acc) ->
    maps:fold(fun(St, V, A) -> maps:update_with({Ty, St}, fun(X) -> X + V end, V, A) end, Acc, C) end,
    #{}, msacc:stats()) end,
Until = fun(Ms) -> timer:sleep(max(0, Ms - os:system_time(millisecond))) end,
{ok, F} = file:open("~FILE~", [write]),
lists:foreach(fun(T) ->
    Until(T - ~BEFORE~), R0 = Reds(), msacc:stop(), msacc:reset(), msacc:start(),
    Until(T + ~AFTER~), M = Msacc(), msacc:stop(), R1 = Reds(),
    io:format(F, "boundary ~p~n", [T]),
    [io:format(F, "reductions ~p ~p~n", [Name(P), R - maps:get(P, R0, 0)])
     || {P, R} <- maps:to_list(R1), R - maps:get(P, R0, 0) > 1000],
    [io:format(F, "msacc ~p ~p ~p~n", [Ty, St, V]) || {{Ty, St}, V} <- maps:to_list(M)]
  end, ~INSTANTS~),
file:close(F).
"""


def _cpu_by_process() -> dict[str, tuple[str, float]]:
    """pid -> (name, CPU seconds so far) of every process on this machine."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            out[pid] = (Path(f"/proc/{pid}/comm").read_text().strip(), cpu_seconds(int(pid)))
        except OSError:  # gone meanwhile
            continue
    return out


class Sampler:
    """Snapshots around each instant of one burst, in the broker and on this machine."""

    def __init__(self) -> None:
        self.file = Path(f"/tmp/runledger-broker-work-{token()}.txt")
        self.cpu: list[dict[str, float]] = []
        self.instants: list[float] = []
        self.broker: subprocess.Popen | None = None
        self.thread: threading.Thread | None = None

    def start(self, due: float) -> None:
        """Called by the burst with its first instant (local clock), ~15 s before it."""
        self.instants = [due + k * PERIOD for k in range(BOUNDARIES)]
        code = (SAMPLER.replace("~FILE~", str(self.file)).replace("~BEFORE~", str(int(BEFORE * 1000)))
                .replace("~AFTER~", str(int(AFTER * 1000)))
                .replace("~INSTANTS~", repr([int(t * 1000) for t in self.instants])))
        self.broker = subprocess.Popen(["rabbitmqctl", "eval", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.thread = threading.Thread(target=self._machine, daemon=True)
        self.thread.start()

    def _machine(self) -> None:
        for t in self.instants:
            time.sleep(max(0.0, t - BEFORE - time.time()))
            before = _cpu_by_process()
            time.sleep(max(0.0, t + AFTER - time.time()))
            after = _cpu_by_process()
            used = {f"{name}:{pid}": cpu - before.get(pid, (name, 0.0))[1] for pid, (name, cpu) in after.items()}
            self.cpu.append({k: round(v, 2) for k, v in used.items() if v > 0})

    def results(self) -> list[dict]:
        """Per boundary: reductions by Erlang module, msacc time by thread type and state (ms), machine CPU."""
        assert self.broker is not None and self.thread is not None
        output = self.broker.communicate(timeout=60)[0].decode(errors="replace")
        self.thread.join(60)
        if not self.file.exists():
            raise RuntimeError(f"rabbitmqctl eval wrote nothing: {output[-1000:]}")
        boundaries: list[dict] = []
        for line in self.file.read_text().splitlines():
            kind, *rest = line.split()
            if kind == "boundary":
                boundaries.append({"reductions": defaultdict(int), "msacc_ms": defaultdict(float)})
            elif kind == "reductions":
                boundaries[-1]["reductions"][rest[0]] += int(rest[1])
            elif kind == "msacc":
                boundaries[-1]["msacc_ms"][f"{rest[0]}.{rest[1]}"] += int(rest[2]) / 1000
        self.file.unlink()
        for b, cpu in zip(boundaries, self.cpu, strict=True):
            b["machine_cpu_s"] = dict(sorted(cpu.items(), key=lambda kv: -kv[1])[:6])
        return boundaries


def _summary(b: dict) -> dict:
    ms = b["msacc_ms"]
    scheduler = {k.split(".", 1)[1]: round(v) for k, v in ms.items() if k.startswith("scheduler.") and
                 not k.endswith(".sleep") and v >= 1}
    top = sorted(b["reductions"].items(), key=lambda kv: -kv[1])[:4]
    return {"reductions_m": round(sum(b["reductions"].values()) / 1e6, 2),
            "by_module_m": {k: round(v / 1e6, 2) for k, v in top},
            "scheduler_busy_ms": sum(scheduler.values()), "scheduler_ms": scheduler,
            "dirty_cpu_gc_ms": round(ms.get("dirty_cpu_scheduler.gc", 0.0)),
            "beam_cpu_s": round(sum(v for k, v in b["machine_cpu_s"].items() if k.startswith("beam.smp")), 2),
            "machine_cpu_s": b["machine_cpu_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--n", type=int, default=10_000)
    args = parser.parse_args()
    rows: list[dict] = []
    for run in range(args.runs):
        sampler = Sampler()
        result = bench_burst.burst(args.n, 1, boundaries=BOUNDARIES, period=PERIOD, on_due=sampler.start)
        seconds = [result["seconds_after_due"], *result["steady_s"]]
        for k, b in enumerate(sampler.results()):
            rows.append(emit({"bench": "broker_work", "run": run, "boundary": "first" if k == 0 else "steady",
                              "seconds": seconds[k], **_summary(b)}))
    print("\n| boundary | s after the instant | reductions (M) | scheduler busy ms | dirty-CPU GC ms | beam CPU s |"
          "\n|---|---|---|---|---|---|")
    for which in ("first", "steady"):
        group = [r for r in rows if r["boundary"] == which]

        def med(key: str, group: list[dict] = group) -> str:
            values = [r[key] for r in group]
            return f"{statistics.median(values):g} ({min(values):g}–{max(values):g})"
        print(f"| {which} ({len(group)}) | {med('seconds')} | {med('reductions_m')} | {med('scheduler_busy_ms')} "
              f"| {med('dirty_cpu_gc_ms')} | {med('beam_cpu_s')} |")


if __name__ == "__main__":
    main()
