"""Which bookie an entry log belongs to: one name per ledger dir, never two dirs merged by
accident.

A log lives in a *ledger dir*: ``<ledger dir>/current/<id>.log`` in a bookie's layout (the
dir of ``ledgerDirectories``), or just the directory holding it when there is no
``current/``. Each ledger dir is named, in order of preference:

1. by the bookie id in its cookie, ``current/VERSION`` (upstream writes one in every ledger
   dir; so does bookiesim): the id the bookie registers under and the ledgers' ensembles
   name, so no ``--bookie-id`` mapping is needed for it;
2. else by its path: its own name (``A/bookie-1`` → ``bookie-1``), or its parent's when the
   name only says "ledgers" (``/data/bk1/ledgers`` → ``bk1``, ``<cluster>/bookie-2/ledgers``
   → ``bookie-2``).

Two ledger dirs with one name are one bookie only when that is what their cookies say: a
bookie with several ``ledgerDirectories`` writes the same cookie, listing them all, into
each, so dirs whose cookie lists them (by path) are that bookie's. Any other clash — copies
of one bookie's data, two ``bookie-1`` dirs under different roots — would silently merge
two bookies' replicas, so those dirs are named by their paths instead, with as many leading
components as it takes to tell them apart (``X/bk``, ``Y/bk``), and a note says so. Should
names still collide, :func:`name_ledger_dirs` refuses with both paths.

The cookie is read here with a few lines rather than with ``bookiesim.metadata``'s codec:
the pipeline depends on ``entrylog`` only (DESIGN.md, layering), its workers import it, and
the one field it needs is a line of protobuf text, ``bookieHost: "127.0.0.1:3181"``.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "COOKIE_FILE",
    "BookieNameError",
    "Cookie",
    "LedgerDir",
    "ledger_dir_of",
    "name_ledger_dirs",
    "path_name",
    "read_cookie",
]

COOKIE_FILE = "VERSION"
"""The cookie's file name, beside the logs in ``<ledger dir>/current/``."""
GENERIC = re.compile(r"ledgers?([-_.]?\d+)?", re.IGNORECASE)
"""Ledger dir names that say nothing about the bookie (``ledgers``, ``ledger2``, ...)."""
_FIELD = re.compile(r'^\s*(\w+)\s*:\s*"((?:[^"\\]|\\.)*)"\s*$')


class BookieNameError(ValueError):
    """Two inputs that would be one bookie by mistake; the message names both."""


@dataclass(frozen=True)
class Cookie:
    bookie_id: str
    ledger_dirs: tuple[str, ...]


@dataclass(frozen=True)
class LedgerDir:
    """A ledger dir found among the inputs: ``logs`` holds its logs (``path/current``, or
    ``path`` itself for loose logs)."""

    path: Path
    logs: Path
    cookie: Cookie | None

    @property
    def base_name(self) -> str:
        return self.cookie.bookie_id if self.cookie else path_name(self.path)


def ledger_dir_of(log: Path) -> tuple[Path, Path]:
    """``(ledger dir, dir of the logs)`` of a log file, paths made absolute."""
    logs = Path(os.path.abspath(log)).parent
    return (logs.parent if logs.name == "current" else logs), logs


def path_name(ledger_dir: Path, components: int = 1) -> str:
    """The name a ledger dir's path gives its bookie; ``components`` > 1 keeps that many
    trailing components of the naming dir (``X/bk``) to tell copies apart."""
    path = Path(os.path.abspath(ledger_dir))
    naming = path.parent if GENERIC.fullmatch(path.name) and path.parent.name else path
    parts = naming.parts[1:] if naming.is_absolute() else naming.parts
    return "/".join(parts[-components:]) or str(naming)


_ESCAPE = re.compile(r"\\([0-7]{1,3}|.)")
_ESCAPED = {"t": 9, "n": 10, "r": 13, '"': 34, "'": 39, "\\": 92}


def _unescape(text: str) -> str:
    """A protobuf text-format string's value: C escapes, non-ASCII bytes as octal."""

    def byte(m: re.Match[str]) -> str:
        code = m.group(1)
        value = int(code, 8) if code[0] in "01234567" else _ESCAPED.get(code, ord(code))
        return chr(value)  # one byte per char, decoded as UTF-8 below

    return _ESCAPE.sub(byte, text).encode("latin-1").decode("utf-8", "replace")


def read_cookie(logs: Path) -> Cookie | None:
    """The bookie id and ledger dirs of ``logs/VERSION``, or None when there is no cookie
    or it names no bookie (the path names the bookie then)."""
    try:
        # Bytes as chars one to one: the values' UTF-8 is decoded once unescaped.
        text = (logs / COOKIE_FILE).read_text(encoding="latin-1")
    except OSError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines()[1:]:  # the first line is the cookie's format version
        if (m := _FIELD.match(line)) is not None:
            fields[m.group(1)] = _unescape(m.group(2))
    bookie_id = fields.get("bookieHost", "").strip()
    if not bookie_id:
        return None
    # ``ledgerDirs: "2\t/d1/ledgers\t/d2/ledgers"``: a count, then the dirs (tab-separated).
    dirs = fields.get("ledgerDirs", "").split("\t")[1:]
    return Cookie(bookie_id, tuple(os.path.abspath(d) for d in dirs if d))


def _one_bookie(dirs: list[LedgerDir]) -> bool:
    """Whether the cookies say these dirs are one bookie's ``ledgerDirectories``."""
    return all(
        d.cookie is not None and os.path.abspath(d.path) in d.cookie.ledger_dirs for d in dirs
    )


def _by_path(dirs: list[LedgerDir]) -> dict[Path, str]:
    """Path names with the fewest trailing components that tell ``dirs`` apart."""
    depth = 1
    while True:
        names = {d.path: path_name(d.path, depth) for d in dirs}
        if len(set(names.values())) == len(dirs) or depth > 64:
            return names
        depth += 1


def name_ledger_dirs(dirs: Iterable[LedgerDir]) -> tuple[dict[Path, str], list[str]]:
    """Each ledger dir's bookie name (by ``path``), and notes on dirs renamed to keep them
    apart. :class:`BookieNameError` if two dirs would still share a name."""
    groups: dict[str, list[LedgerDir]] = defaultdict(list)
    for d in dirs:
        groups[d.base_name].append(d)
    names: dict[Path, str] = {}
    notes: list[str] = []
    for base, group in groups.items():
        if len(group) == 1 or _one_bookie(group):
            names.update((d.path, base) for d in group)
            continue
        renamed = _by_path(group)
        names.update(renamed)
        why = "their cookies say" if group[0].cookie else "their paths say"
        each = "both" if len(group) == 2 else "all"
        notes.append(
            f"{' and '.join(str(d.path) for d in group)} are {each} bookie {base} ({why}); "
            f"named {' and '.join(renamed[d.path] for d in group)} to keep their counts apart"
        )
    owners: dict[str, Path] = {}
    for path, name in names.items():
        if (other := owners.setdefault(name, path)) != path and not _one_bookie(
            [d for g in groups.values() for d in g if d.path in (path, other)]
        ):
            raise BookieNameError(
                f"{other} and {path} would both be bookie {name}: "
                "give them in separate runs, or rename one"
            )
    return names, notes
