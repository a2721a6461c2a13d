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

READ_ONLY_DISABLED = 5
"""The bookie had to turn read-only (every ledger disk full, or its journal or storage
failed) and ``readOnlyModeEnabled=false``: it stopped by itself instead (final checkpoint
attempted, nothing acknowledged lost). Upstream exits with the same code
(``BOOKIE_EXCEPTION``) then."""

UNUSABLE_DIRECTORY = 6
"""A journal, ledger or index directory cannot be written (read-only file system, no
permission, not a directory): the bookie opened nothing. The log line names it."""

UNAVAILABLE = 7
"""What the bookie needs from outside was not there at start: its port was taken (the line
names the address and ``bookiePort`` or ``httpServerPort``) or its metadata store did not
answer within its connect timeout (the line names the URI). Upstream's bookie exits 2
(``SERVER_EXCEPTION``) for these; a code of its own tells an operator to look at the
machine, not at the configuration or the directories."""

MEANINGS = {
    BAD_CONFIGURATION: "bad configuration",
    UNCLEAN_STOP: "its stop logged a disk error; nothing acknowledged is lost",
    INVALID_COOKIE: "its cookies refused the start (see its log)",
    READ_ONLY_DISABLED: "it had to turn read-only and readOnlyModeEnabled=false (see its log)",
    UNUSABLE_DIRECTORY: "one of its directories cannot be written (see its log)",
    UNAVAILABLE: "its port is taken or its metadata store did not answer (see its log)",
}
