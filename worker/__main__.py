"""``python -m worker``: run a worker process until SIGTERM."""
from __future__ import annotations

import sys

from opsboard.cli import main

if __name__ == "__main__":
    sys.exit(main(["worker", *sys.argv[1:]]))
