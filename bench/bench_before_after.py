"""Before/after: the one-beat 10k RabbitMQ burst of another revision and of this checkout, alternated.

Each burst is reported as a ratio to the broker ceiling measured just before and just after it
(``bench.run._amqp_burst``), so the machine's drift between runs cancels out; the two trees take turns,
``--rounds`` times each. Prints every run as a JSON line, then the median and min-max of each tree's ratios.

    .venv/bin/python bench/bench_before_after.py --base main --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What each run prints: the burst, the ceiling beside it, and their ratio.
ONE_RUN = ("import json; from bench.run import _amqp_burst; r = _amqp_burst({n}, 1); "
           "print('RESULT ' + json.dumps({{k: r[k] for k in ('fires_per_s', 'baseline_per_s', 'ratio', "
           "'seconds_after_due', 'duplicate_rows', 'duplicate_messages')}}))")


def export(revision: str, into: Path) -> Path:
    """The tree of ``revision`` (git archive), unpacked under ``into``."""
    target = into / "base"
    target.mkdir()
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def one_run(tree: Path, n: int) -> dict:
    """One burst with ``tree``'s runledger_beat (beat's subprocess takes it from PYTHONPATH too)."""
    done = subprocess.run([sys.executable, "-c", ONE_RUN.format(n=n)], cwd=tree, env={"PYTHONPATH": str(tree),
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"burst with {tree} failed: {done.stderr[-2000:]}")
    return json.loads(lines[0].removeprefix("RESULT "))


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="git revision to compare with (default main)")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per tree, alternated (default 3)")
    parser.add_argument("--n", type=int, default=10_000, help="fires per burst (default 10000)")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {args.base: [], "this checkout": []}
    with tempfile.TemporaryDirectory(prefix="bench-before-after-") as tmp:
        trees = {args.base: export(args.base, Path(tmp)), "this checkout": ROOT}
        for round_ in range(args.rounds):
            for label, tree in trees.items():
                result = one_run(tree, args.n)
                runs[label].append(result)
                print(json.dumps({"round": round_, "tree": label, **result}), flush=True)
    for label, results in runs.items():
        ratios = [r["ratio"] for r in results]
        print(f"{label}: burst / broker ceiling, median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} runs)")
    return runs


if __name__ == "__main__":
    main()
