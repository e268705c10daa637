"""``python -m worker``: run a worker process until SIGTERM (see :mod:`worker.cli`)."""
from __future__ import annotations

import sys

from worker.cli import main

if __name__ == "__main__":
    sys.exit(main())
