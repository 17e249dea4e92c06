"""What the test processes of one run share: a folder (tests/conftest.py makes it; the parallel workers inherit
it), and things made once in it by whichever process asks first."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def shared() -> Path:
    """The folder this run's test processes share."""
    return Path(os.environ["RUNLEDGER_TEST_RUN_DIR"])


def once(root: Path, name: str, make: Callable[[Path], None]) -> Path:
    """``root/name``, a folder made by ``make`` once per run, whichever test process asks first (the others
    wait)."""
    target = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / f"{name}.done").exists():
            shutil.rmtree(target, ignore_errors=True)  # what a failed attempt left
            target.mkdir()
            make(target)
            (root / f"{name}.done").touch()
    return target
