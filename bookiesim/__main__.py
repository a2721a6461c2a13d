"""``python -m bookiesim``: the ``bookiesim`` command, for spawning it from Python without
relying on the console script being on ``PATH`` (the process spawners do)."""

import sys

from bookiesim.cli.main import main

sys.exit(main())
