"""``bookiesim shell``: look inside a bookie's files (upstream's ``bookkeeper shell``).

Why this module exists: when a bookie refuses to start or a ledger reads back wrong, the
first question is what is actually on disk. These commands answer it for our files and for
upstream's (the formats are the same), streaming so that a 2 GB entry log or journal is never
held in memory and ``| head`` shows rows at once.

Every byte rule lives in the format modules; this module only chooses what to print. A file
that is not what it claims ends the command with one line on stderr, ``bookiesim shell CMD:
FILE: offset N: what is wrong``, and exit code 2 (rows already printed stay printed).

One module per group of commands: ``entry_logs`` (readlog), ``journal_files`` (readjournal,
readindex, lastmark), ``gc_admin`` (gc), ``mlinfo`` and ``cookies`` (which read or write the
metadata store), ``autorecovery`` (listunderreplicated, whoisauditor, triggeraudit,
lostbookierecoverydelay, autorecovery) and ``recovery`` (recover, decommissionbookie), which
act on a cluster's auto-recovery as upstream's shell does; ``common`` is what they share.

Upstream's cluster verbs, with upstream's option names and output lines: ``bookies``
(listbookies, bookieinfo), ``ledger_verbs`` (listledgers, ledgermetadata, readledger),
``client_checks`` (simpletest, bookiesanity), ``disk_files`` (listfilesondisc, and readlog's
log ids); ``cluster_target`` is how they find the cluster (``-conf FILE`` before or after
the verb, ``--metadata URI``, ``--cluster DIR``).
"""

from __future__ import annotations

import argparse

from bookiesim.cli.shell import entry_logs, gc_admin, journal_files
from bookiesim.cli.shell.autorecovery import register_autorecovery_commands
from bookiesim.cli.shell.bookies import register_bookie_verbs
from bookiesim.cli.shell.client_checks import register_client_checks
from bookiesim.cli.shell.cluster_target import add_conf_argument
from bookiesim.cli.shell.common import COMMON_JSON, Command, runner
from bookiesim.cli.shell.cookies import register_cookie_commands
from bookiesim.cli.shell.disk_files import register_listfilesondisc
from bookiesim.cli.shell.ledger_verbs import register_ledger_verbs
from bookiesim.cli.shell.mlinfo import register_mlinfo
from bookiesim.cli.shell.recovery import register_recovery_commands

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    shell = subparsers.add_parser(
        "shell",
        help="inspect entry logs, journals, index files and lastMark; auto-recovery by hand",
        description="Inspect a bookie's files (ours or upstream's: the formats are the same). "
        "Exit code 2 and one line on stderr when a file is missing or not what it claims.",
    )
    add_conf_argument(shell, dest="shell_conf")
    commands = shell.add_subparsers(dest="shell_command", metavar="COMMAND", required=True)

    def add(name: str, help_text: str, epilog: str, run: Command) -> argparse.ArgumentParser:
        parser = commands.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=epilog + "\n" + COMMON_JSON,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument("--json", action="store_true", help="one JSON object per line")
        parser.set_defaults(func=runner(name, run))
        return parser

    readlog = add(
        "readlog",
        "print the entries of an entry log (<hex id>.log)",
        entry_logs.READLOG_KEYS,
        entry_logs.readlog,
    )
    readlog.add_argument(
        "file",
        metavar="FILE|ID",
        help="the entry log's path, or its id (decimal, as upstream's; found through -conf)",
    )
    add_conf_argument(readlog)
    readlog.add_argument("--ledgers-map", action="store_true", help="print the ledgers map")
    readlog.add_argument(
        "-l", "--ledgerid", "--ledger", dest="ledger", type=int, metavar="L",
        help="only entries of ledger L",
    )  # fmt: skip
    readlog.add_argument(
        "-e", "--entryid", "--entry", dest="entry", type=int, metavar="E",
        help="only entries with id E",
    )  # fmt: skip
    readlog.add_argument(
        "-m", "--msg", "--print-body", dest="print_body", action="store_true",
        help="print entry bodies too",
    )  # fmt: skip
    readlog.add_argument(
        "--upstream-output",
        action="store_true",
        help="print upstream's entry blocks (--------- Lid=L, Eid=E, ByteOffset=P, ...)",
    )
    readlog.add_argument(
        "-sp", "--startpos", type=int, metavar="P",
        help="with --upstream-output: records overlapping bytes P.. only",
    )  # fmt: skip
    readlog.add_argument(
        "-ep", "--endpos", type=int, metavar="P",
        help="with --upstream-output: records starting at P or before only",
    )  # fmt: skip
    readlog.add_argument(
        "--log-id",
        type=entry_logs.log_id,
        metavar="ID",
        help="the log id, for a file not named <hex id>.log (decimal, or hex with 0x)",
    )

    readjournal = add(
        "readjournal",
        "print the records of a journal file (<hex id>.txn)",
        journal_files.READJOURNAL_KEYS,
        journal_files.readjournal,
    )
    readjournal.add_argument("file", metavar="FILE")

    readindex = add(
        "readindex",
        "print a ledger index file (<hex ledger id>.idx)",
        journal_files.READINDEX_KEYS,
        journal_files.readindex,
    )
    readindex.add_argument("file", metavar="FILE")

    lastmark = add(
        "lastmark",
        "print the journal position a ledger directory was checkpointed at",
        journal_files.LASTMARK_KEYS,
        journal_files.lastmark,
    )
    lastmark.add_argument("dir", metavar="DIR")

    register_bookie_verbs(commands)
    register_ledger_verbs(commands)
    register_client_checks(commands)
    register_listfilesondisc(commands)
    register_mlinfo(commands)
    register_cookie_commands(commands)
    register_autorecovery_commands(commands)
    register_recovery_commands(commands)

    gc = commands.add_parser(
        "gc",
        help="force a garbage collection on a running bookie and show its entry logs' usage",
        description="Force a GC pass on a running bookie through its admin HTTP API (PUT "
        "/api/v1/bookie/gc), wait for it, and list the usage of every entry log GC tracks "
        "(GET /api/v1/bookie/gc_details). Exit code 2 when the bookie cannot be reached or "
        "refuses the request.",
        epilog=gc_admin.GC_KEYS + "\n" + COMMON_JSON,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gc.add_argument("--json", action="store_true", help="one JSON object per line")
    where = gc.add_mutually_exclusive_group()
    where.add_argument("--url", help="the bookie's admin base URL, e.g. http://127.0.0.1:8080")
    where.add_argument("--host", default="127.0.0.1", help="admin host (default 127.0.0.1)")
    gc.add_argument("--port", type=int, help="admin port (httpServerPort)")
    what = gc.add_mutually_exclusive_group()
    what.add_argument("--major", action="store_true", help="allow only major compaction")
    what.add_argument("--minor", action="store_true", help="allow only minor compaction")
    what.add_argument(
        "--no-compaction", action="store_true", help="collect garbage, compact nothing"
    )
    what.add_argument("--details", action="store_true", help="only show usage, trigger nothing")
    what.add_argument(
        "--suspend",
        choices=("major", "minor", "both"),
        help="suspend scheduled compaction",
    )
    what.add_argument(
        "--resume", choices=("major", "minor", "both"), help="resume suspended compaction"
    )
    gc.add_argument(
        "--no-wait", action="store_true", help="return once triggered, before the pass ends"
    )
    gc.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for the bookie (600)"
    )
    gc.set_defaults(func=gc_admin.gc_command)
