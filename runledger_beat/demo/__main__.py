"""``python -m runledger_beat.demo [--seconds N]``."""

import sys

from .runner import main

sys.exit(main())
