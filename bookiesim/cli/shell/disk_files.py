"""``bookiesim shell listfilesondisc``, and where ``readlog ID`` finds entry log ID: a
bookie's files, found through its ``-conf``.

``listfilesondisc -txn -log -idx`` prints, for each kind asked for, upstream's header line
(``--------- Printing the list of Journal Files ---------``, ``... EntryLog/Ledger Files
...``, ``... Index Files ...``) and then the canonical path of every journal (``.txn``),
entry log (``.log``) or index file (``.idx``) under the configured journal, ledger or index
directories (index: the ledger directories when none are set), searched recursively, oldest
first (by modification time: Linux gives no creation time to compare), an empty line after
the journals and the entry logs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bookiesim.cli.client_actions import CommandError
from bookiesim.cli.shell.cluster_target import (
    add_conf_argument,
    bookie_conf,
    conf_path,
    verb_parser,
)
from bookiesim.cli.shell.common import EXIT_BAD_FILE, Out, ShellError, runner
from bookiesim.entrylog.format import MAX_LOG_ID, parse_log_file_name

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterable

    from bookiesim.bookie.config import BookieConfig

__all__ = [
    "entry_log_path",
    "files_sorted",
    "locate_entry_log",
    "register_listfilesondisc",
]

CURRENT = "current"


def files_sorted(dirs: Iterable[Path], suffix: str) -> list[Path]:
    """Every file named ``*.suffix`` under ``dirs`` (recursively), oldest first."""
    found: list[tuple[float, str, Path]] = []
    for directory in dirs:
        for parent, _, names in os.walk(directory):
            for name in names:
                if name.endswith("." + suffix):
                    path = Path(parent) / name
                    try:
                        mtime = path.stat().st_mtime
                    except OSError:
                        continue  # removed since it was listed (GC, journal rotation)
                    found.append((mtime, str(path), path))
    found.sort()
    return [path for _, _, path in found]


def _section(out: Out, title: str, paths: list[Path], blank_after: bool) -> None:
    out.lines.line(f"--------- Printing the list of {title} ---------")
    for path in paths:
        out.lines.line(os.path.realpath(path))
    if blank_after:
        out.lines.line("")


def listfilesondisc(args: argparse.Namespace, out: Out) -> int:
    conf: BookieConfig = args.loaded_conf
    if not (args.journal or args.entrylog or args.index):
        # Upstream prints nothing then; a line on stderr says why, stdout stays upstream's.
        print("listfilesondisc: nothing asked for: give -txn, -log and/or -idx", file=sys.stderr)
        return 0
    if args.journal:
        journals = files_sorted(conf.effective_journal_directories, "txn")
        _section(out, "Journal Files", journals, True)
    if args.entrylog:
        logs = files_sorted(conf.ledger_directories, "log")
        _section(out, "EntryLog/Ledger Files", logs, True)
    if args.index:
        indexes = files_sorted(conf.effective_index_directories, "idx")
        _section(out, "Index Files", indexes, False)
    return 0


def entry_log_path(conf: BookieConfig, log_id: int) -> Path:
    """Where the bookie of ``conf`` keeps entry log ``log_id`` (``<hex>.log`` in a ledger
    directory's ``current``); :class:`ShellError` naming the directories searched."""
    if not 0 <= log_id <= MAX_LOG_ID:
        raise ShellError(str(log_id), f"not a log id (0..{MAX_LOG_ID})")
    name = f"{log_id:x}.log"
    searched = [Path(d) / CURRENT for d in conf.ledger_directories]
    for directory in searched:
        if (directory / name).exists():
            return directory / name
    where = ", ".join(str(d) for d in searched)
    raise ShellError(name, f"entry log {log_id} is in none of the ledger directories ({where})")


def locate_entry_log(args: argparse.Namespace) -> tuple[Path, int | None]:
    """The entry log ``readlog`` is to read, and its id if known before reading the name:
    a number is a log id, as upstream takes it, found in the ledger directories of the
    ``-conf`` bookie; a path is read where it is, or, when there is nothing there and a
    ``-conf`` is given, looked up by the id in its name, as upstream looks it up."""
    text: str = args.file
    given = conf_path_or_none(args)
    if text.isdigit():
        if given is None:
            raise ShellError(text, "a log id needs the bookie's -conf FILE (or give the path)")
        log_id = int(text)
        if args.log_id is not None and args.log_id != log_id:
            raise ShellError(text, f"--log-id {args.log_id} contradicts log id {log_id}")
        return entry_log_path(_conf(args), log_id), log_id
    path = Path(text)
    if given is not None and not path.exists():
        named: int | None = args.log_id
        if named is None:
            named = parse_log_file_name(path.name)
        if named is None:
            raise ShellError(path, "no such file, and not named <hex id>.log to look up")
        return entry_log_path(_conf(args), named), named
    return path, args.log_id


def conf_path_or_none(args: argparse.Namespace) -> str | None:
    try:
        return conf_path(args)
    except CommandError as exc:
        raise ShellError("-conf", str(exc)) from None


def _conf(args: argparse.Namespace) -> BookieConfig:
    try:
        return bookie_conf(args, "readlog")
    except CommandError as exc:
        raise ShellError("-conf", str(exc)) from None


def register_listfilesondisc(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    p = verb_parser(
        commands, "listfilesondisc", "list the journal, entry log and index files of a bookie"
    )
    add_conf_argument(p)
    p.add_argument("-txn", "--journal", action="store_true", help="journal files")
    p.add_argument("-log", "--entrylog", action="store_true", help="entry log files")
    p.add_argument("-idx", "--index", action="store_true", help="index files")
    p.set_defaults(func=_listfilesondisc_command, json=False, dir=None)


def _listfilesondisc_command(args: argparse.Namespace) -> int:
    try:
        args.loaded_conf = bookie_conf(args, "listfilesondisc")
    except CommandError as exc:
        print(f"bookiesim shell listfilesondisc: {exc}", file=sys.stderr)
        return EXIT_BAD_FILE
    return runner("listfilesondisc", listfilesondisc)(args)
