"""Exit codes of ``bookiesim bookie``, in one place for the process and whoever runs it."""

from __future__ import annotations

OK = 0
"""Stopped cleanly (SIGINT or SIGTERM, final checkpoint done)."""
BAD_CONFIGURATION = 2
"""An unknown or ill-typed key, or an unreadable configuration file: the bookie never ran."""
UNCLEAN_STOP = 3
"""The stop logged a disk error (final checkpoint, journal or log close). Nothing
acknowledged is lost (the next start replays the journal), but the stop was not clean."""

MEANINGS = {
    BAD_CONFIGURATION: "bad configuration",
    UNCLEAN_STOP: "its stop logged a disk error; nothing acknowledged is lost",
}
