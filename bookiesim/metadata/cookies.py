"""Bookie cookies: upstream's text format and its comparison rules, without I/O.

Why cookies exist (upstream's ``Cookie``): a bookie's identity is its id plus the directories
holding its data. When it first starts it stamps a cookie naming them into each of its
directories (``current/VERSION``) and into the metadata store (``<ledgers root>/cookies/<bookie
id>``); every later start compares them with its configuration and refuses to run on a
mismatch. So a bookie whose ledger disk went missing, that was pointed at another bookie's
directories, or that moved to another cluster fails loudly instead of serving with data gone.

The bytes, as upstream 4.17.4 writes them (``disk/VERSION.*.bin`` in the vectors)::

    5
    bookieHost: "127.0.0.1:35181"
    journalDir: "/tmp/vec/bd/journal"
    ledgerDirs: "1\\t/tmp/vec/bd/ledgers"
    instanceId: "6d879652-9bc4-4e3a-a1cc-d087cb299cd4"

The layout version on the first line, then ``CookieFormat`` (``DataFormats.proto``) in
protobuf text format: fields in number order, unset optionals left out. ``journalDir`` is the
journal directories joined by commas; ``ledgerDirs`` and ``indexDirs`` are the count and the
directories, tab separated. Layout version 3 cookies (three plain lines) are still read.

Comparison (upstream's ``Cookie.verify``): bookie id, journal dirs and ledger dirs must be
equal as strings, index dirs too (a cookie without them means "the ledger dirs"), and the
instance ids must be equal, where having none on one side only is a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from bookiesim.metadata.store import join_path
from bookiesim.metadata.text_format import print_text, quote
from bookiesim.proto.DataFormats_pb2 import CookieFormat

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "COOKIE_LAYOUT_VERSION",
    "VERSION_FILE",
    "Cookie",
    "CookieFormatError",
    "Mismatch",
    "cookie_node",
    "decode_dir_paths",
    "encode_dir_paths",
]

COOKIE_LAYOUT_VERSION: Final = 5
"""Upstream's ``CURRENT_COOKIE_LAYOUT_VERSION``; the only version written."""
OLDEST_COMPARABLE_VERSION: Final = 3
"""Older cookies than this cannot be compared (upstream: "Cookie is of too old version")."""
VERSION_FILE: Final = "VERSION"
"""A directory's cookie: ``<dir>/current/VERSION`` (upstream's ``VERSION_FILENAME``)."""
_SEPARATOR: Final = "\t"


def cookie_node(ledgers_root: str, bookie_id: str) -> str:
    """Where the metadata store keeps a bookie's cookie (``ROOT/cookies/ID``)."""
    return join_path(join_path(ledgers_root, "cookies"), bookie_id)


class CookieFormatError(ValueError):
    """Bytes that are not a cookie; the message names where they came from."""


def encode_dir_paths(dirs: Sequence[str]) -> str:
    """Upstream's ``encodeDirPaths``: ``"<count>\\t<dir1>\\t<dir2>..."``."""
    return _SEPARATOR.join([str(len(dirs)), *dirs])


def decode_dir_paths(text: str) -> list[str]:
    """The directories of an :func:`encode_dir_paths` string (the count is skipped, as
    upstream does)."""
    _, _, rest = text.partition(_SEPARATOR)
    return rest.split(_SEPARATOR)


@dataclass(frozen=True)
class Mismatch:
    """One field where a found cookie differs from the expected one."""

    field: str
    """The field's name in the text format (``bookieHost``, ``journalDir``, ...)."""
    found: str | None
    expected: str | None

    def __str__(self) -> str:
        return f"{self.field} {_show(self.found)} (configured: {_show(self.expected)})"


def _show(value: str | None) -> str:
    return "none" if value is None else quote(value)


@dataclass(frozen=True)
class Cookie:
    """One cookie's fields, as stored (directory lists in their encoded form)."""

    bookie_id: str
    journal_dirs: str
    ledger_dirs: str
    instance_id: str | None = None
    index_dirs: str | None = None
    layout_version: int = COOKIE_LAYOUT_VERSION

    @classmethod
    def for_bookie(
        cls,
        bookie_id: str,
        journal_dirs: Sequence[str],
        ledger_dirs: Sequence[str],
        *,
        index_dirs: Sequence[str] | None = None,
        instance_id: str | None = None,
    ) -> Cookie:
        """The cookie a bookie with this configuration stamps (upstream's
        ``generateCookie``): ``index_dirs`` only when they are configured."""
        return cls(
            bookie_id=bookie_id,
            journal_dirs=",".join(journal_dirs),
            ledger_dirs=encode_dir_paths(ledger_dirs),
            instance_id=instance_id or None,
            index_dirs=None if index_dirs is None else encode_dir_paths(index_dirs),
        )

    # -- bytes -----------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The cookie's bytes, equal to upstream's for the same fields (always version 5)."""
        fields = CookieFormat(
            bookieHost=self.bookie_id,
            journalDir=self.journal_dirs,
            ledgerDirs=self.ledger_dirs,
            instanceId=self.instance_id,
            indexDirs=self.index_dirs,
        )
        return f"{COOKIE_LAYOUT_VERSION}\n".encode("ascii") + print_text(fields)

    @classmethod
    def decode(cls, data: bytes, where: str = "<cookie>") -> Cookie:
        """Parse a cookie; :class:`CookieFormatError` naming ``where`` if it is not one."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CookieFormatError(f"{where}: not a cookie: not UTF-8 text ({exc})") from None
        first, _, rest = text.partition("\n")
        try:
            version = int(first.strip())
        except ValueError:
            raise CookieFormatError(
                f"{where}: not a cookie: the first line {first.strip()[:40]!r} is not a "
                "layout version"
            ) from None
        if version == OLDEST_COMPARABLE_VERSION:
            lines = rest.split("\n")
            if len(lines) < 3:
                raise CookieFormatError(
                    f"{where}: a version 3 cookie has 3 lines after the version, this one "
                    f"{len(lines)}"
                )
            return cls(lines[0], lines[1], lines[2], layout_version=version)
        if version < OLDEST_COMPARABLE_VERSION:
            # Upstream reads no fields from these; comparing one refuses it as too old.
            return cls("", "", "", layout_version=version)
        message = CookieFormat()
        try:
            text_format.Parse(rest, message)
        except (text_format.ParseError, DecodeError) as exc:
            raise CookieFormatError(f"{where}: not a cookie: {exc}") from None
        if not message.IsInitialized():
            missing = ", ".join(
                name
                for name in ("bookieHost", "journalDir", "ledgerDirs")
                if not message.HasField(name)
            )
            raise CookieFormatError(f"{where}: cookie without {missing}")
        return cls(
            bookie_id=message.bookieHost,
            journal_dirs=message.journalDir,
            ledger_dirs=message.ledgerDirs,
            # Upstream treats an empty optional as absent.
            instance_id=message.instanceId or None,
            index_dirs=message.indexDirs or None,
            layout_version=version,
        )

    # -- comparison ------------------------------------------------------------------------

    def ledger_dir_paths(self) -> list[str]:
        return decode_dir_paths(self.ledger_dirs)

    def mismatches(self, found: Cookie, *, allow_expansion: bool = False) -> list[Mismatch]:
        """How ``found`` differs from this (expected) cookie, by upstream's rules; empty
        when it matches. With ``allow_expansion`` (upstream's ``allowStorageExpansion``) the
        configured ledger and index dirs may be a superset of the found ones."""
        if found.layout_version < OLDEST_COMPARABLE_VERSION:
            return [Mismatch("layoutVersion", str(found.layout_version), str(self.layout_version))]
        out: list[Mismatch] = []
        if found.bookie_id != self.bookie_id:
            out.append(Mismatch("bookieHost", found.bookie_id, self.bookie_id))
        if found.journal_dirs != self.journal_dirs:
            out.append(Mismatch("journalDir", found.journal_dirs, self.journal_dirs))
        if not _dirs_match(self.ledger_dirs, found.ledger_dirs, allow_expansion):
            out.append(Mismatch("ledgerDirs", found.ledger_dirs, self.ledger_dirs))
        mine = self.index_dirs or self.ledger_dirs
        theirs = found.index_dirs or found.ledger_dirs
        if not _dirs_match(mine, theirs, allow_expansion):
            out.append(Mismatch("indexDirs", theirs, mine))
        if found.instance_id != self.instance_id:
            out.append(Mismatch("instanceId", found.instance_id, self.instance_id))
        return out


def _dirs_match(configured: str, found: str, allow_expansion: bool) -> bool:
    if not allow_expansion:
        return configured == found
    return set(decode_dir_paths(found)) <= set(decode_dir_paths(configured))
