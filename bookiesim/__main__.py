"""``python -m bookiesim``: the ``bookiesim`` command, for spawning it from Python without
relying on the console script being on ``PATH`` (the process spawners do)."""

import sys

from bookiesim.cli.main import main

if __name__ == "__main__":  # not when a spawned worker process imports it
    sys.exit(main())
