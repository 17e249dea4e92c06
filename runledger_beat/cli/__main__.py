"""``python -m runledger_beat.cli``."""

import sys

from . import main

sys.exit(main())
