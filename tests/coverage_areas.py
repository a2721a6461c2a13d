"""Print the branch coverage of the areas held to 90% (and with ``--whole`` of the whole
package), after ``coverage run -m pytest`` and ``coverage combine``: ``make test`` measures
the areas on their own tests, ``make coverage`` the whole suite.

The areas are the wire layer, the entry-log format, the garbage collector and the parts of
the bookie and the client that do no I/O (formats, state tables, policies): code a test can
reach with no socket or file, so a branch left uncovered there is a test not written. Exits 1
if one of them is below the floor.
"""

from __future__ import annotations

import io
import sys
from typing import TYPE_CHECKING

import coverage

if TYPE_CHECKING:
    from collections.abc import Sequence

FLOOR = 90.0

PURE_BOOKIE = (
    "bookie/config.py",
    "bookie/disk_state.py",
    "bookie/errors.py",
    "bookie/exit_codes.py",
    "bookie/index_format.py",
    "bookie/ledger_state.py",
    "bookie/journal/decoder.py",
    "bookie/journal/records.py",
    "bookie/journal/log_mark.py",
)
PURE_CLIENT = (
    "client/context.py",
    "client/digest.py",
    "client/distribution.py",
    "client/errors.py",
    "client/failed_bookies.py",
    "client/handle_state.py",
    "client/wire.py",
)
AREAS: dict[str, Sequence[str]] = {
    "proto/": ("proto/*",),
    "entrylog/": ("entrylog/*",),
    "gc/": ("gc/*",),
    "bookie/, no I/O": PURE_BOOKIE,
    "client/, no I/O": PURE_CLIENT,
}


def percent(cov: coverage.Coverage, include: Sequence[str] | None) -> float:
    patterns = None if include is None else [f"*/bookiesim/{p}" for p in include]
    return float(cov.report(include=patterns, file=io.StringIO()))


def main() -> int:
    cov = coverage.Coverage()
    cov.load()
    if "--whole" in sys.argv[1:]:
        print(f"branch coverage, whole package: {percent(cov, None):.1f}%")
    low = []
    for name, include in AREAS.items():
        figure = percent(cov, include)
        mark = "" if figure >= FLOOR else f"  (below {FLOOR:.0f}%)"
        print(f"branch coverage, {name}: {figure:.1f}%{mark}")
        if figure < FLOOR:
            low.append(name)
    if low:
        print(f"coverage below {FLOOR:.0f}% in: {', '.join(low)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
