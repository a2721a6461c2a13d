"""Exit codes of ``bookiesim bookie``, in one place for the process and whoever runs it."""

from __future__ import annotations

OK = 0
"""Stopped cleanly (SIGINT or SIGTERM, final checkpoint done)."""
BAD_CONFIGURATION = 2
"""An unknown or ill-typed key, or an unreadable configuration file: the bookie never ran."""
UNCLEAN_STOP = 3
"""The stop logged a disk error (final checkpoint, journal or log close). Nothing
acknowledged is lost (the next start replays the journal), but the stop was not clean."""

INVALID_COOKIE = 4
"""The cookies refused the start (another bookie's directories, a directory missing, wiped or
moved, another cluster, or with ``bookiePort=0`` the port its cookie names is taken): the
bookie opened no storage. Upstream's bookie exits 2
(``SERVER_EXCEPTION``) for this, as for any failure to build its server; a code of its own
tells an operator to look at the directories, not at the configuration's syntax."""

MEANINGS = {
    BAD_CONFIGURATION: "bad configuration",
    UNCLEAN_STOP: "its stop logged a disk error; nothing acknowledged is lost",
    INVALID_COOKIE: "its cookies refused the start (see its log)",
}
