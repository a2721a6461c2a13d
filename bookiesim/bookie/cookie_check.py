"""The start-up cookie check: read, compare and stamp cookies before any storage opens.

Why: a bookie must not serve from directories that are not the ones it wrote (a disk
replaced, a directory missing from the configuration, another bookie's data, another
cluster). Upstream checks this with ``LegacyCookieValidation`` before it builds its ledger
storage; this module does the same with the format and rules of
:mod:`bookiesim.metadata.cookies`. The directories are ``current/`` of every journal, ledger
and index directory (each once); the store's cookie is ``<ledgers root>/cookies/<bookie id>``.

Decisions, in upstream's order:

1. The store's cookie, if any, must match the configuration (bookie id, dirs, instance id).
2. Each directory's ``VERSION``, if any, must match too.
3. Directories without one: if the store has no cookie either, it is a new bookie and they
   must be empty; then every directory and the store are stamped. If the store has a cookie,
   they are refused (a wiped or replaced disk, or a directory added without
   ``allowStorageExpansion``).
4. Every directory has a cookie but the store has none: refused (the bookie's cookie was
   removed from the cluster, or it belongs to another one).

bookiesim's own additions:

* Directories written by the previous bookiesim, which wrote no cookies, are *adopted*: when
  neither the store nor any directory has a cookie for this bookie (exactly what that
  version left) and some directories hold data, they are stamped with a WARNING naming them
  and their index files are padded to whole pages (see :mod:`.ledger_index`). Any other
  inconsistency is refused.
* Without a metadata store, the directories' own cookies stand in for the store's: one
  directory without a cookie beside others that have one is refused, not stamped.
* ``bookiePort=0`` (a free port) is resolved before the check, so a cookie always names the
  id the bookie registers with (:func:`cookie_port`): a bookie whose directories have a
  cookie binds the port that cookie names (and is refused when it is taken); a new one binds
  a free port and stamps it. Upstream computes the id from the configuration before it binds
  and would write ``host:0``, which no ensemble names and every ephemeral-port bookie of a
  cluster would share in the store; a cookie naming port 0 (written by bookiesim before it
  resolved the port) is refused with the way out (``updatecookie --set bookiePort=PORT``).

A refusal is a :class:`CookieError` whose message is one line naming the directory (or the
store node) and what differs.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bookiesim.bookie.index_file import pad_index_files
from bookiesim.entrylog.writeback import fsync_directory
from bookiesim.metadata.cookies import (
    VERSION_FILE,
    Cookie,
    CookieFormatError,
    Mismatch,
    cookie_node,
    decode_dir_paths,
)
from bookiesim.metadata.errors import NodeExistsError
from bookiesim.metadata.store import ANY_VERSION, MetadataStore

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bookiesim.bookie.config import BookieConfig

__all__ = [
    "CookieError",
    "CookieOutcome",
    "check_cookies",
    "cookie_dirs",
    "cookie_port",
    "expected_cookie",
    "read_dir_cookie",
    "resolve_cookie_port",
    "stamp_cookies",
    "write_dir_cookie",
]

log = logging.getLogger(__name__)


class CookieError(Exception):
    """The bookie must not start: one line naming the directory or node and the cookie."""


@dataclass
class CookieOutcome:
    """What :func:`check_cookies` did."""

    stamped: list[Path] = field(default_factory=list)
    """Directories (``current/``) given a cookie now."""
    stamped_store: str | None = None
    """The store node written now, if any."""
    adopted: bool = False
    """Previous-version directories were adopted (stamped with a warning)."""


def cookie_dirs(cfg: BookieConfig) -> list[Path]:
    """``current/`` of every journal, ledger and index directory, each once, in upstream's
    order (``storageDirectoriesFromConf``)."""
    dirs: list[Path] = []
    for d in (
        *cfg.effective_journal_directories,
        *cfg.ledger_directories,
        *cfg.effective_index_directories,
    ):
        current = Path(d) / "current"
        if current not in dirs:
            dirs.append(current)
    return dirs


def cookie_bookie_id(cfg: BookieConfig) -> str:
    """The bookie id a cookie names: the configured address and port, as upstream's
    ``getBookieId`` (a ``bookiePort`` of 0 is resolved first: :func:`cookie_port`)."""
    return f"{cfg.bookie_address}:{cfg.bookie_port}"


def cookie_port(cfg: BookieConfig) -> int | None:
    """The port the cookie in ``cfg``'s directories names, for a bookie configured with
    ``bookiePort=0``: it must come back under the id its ledgers' ensembles name. None when
    no directory has a cookie (a new bookie); :class:`CookieError` when the cookie names port
    0 (stamped by bookiesim before it resolved the port: the id the bookie registered with
    is not in it) or no port at all."""
    for current in cookie_dirs(cfg):
        cookie = read_dir_cookie(current)
        if cookie is None:
            continue
        where = current / VERSION_FILE
        _, _, text = cookie.bookie_id.rpartition(":")
        try:
            port = int(text)
        except ValueError:
            raise CookieError(
                f"{where}: cookie of bookie {cookie.bookie_id or '?'} names no port, and "
                "bookiePort=0 asks for the cookie's: set bookiePort"
            ) from None
        if port == 0:
            raise CookieError(
                f"{where}: cookie of bookie {cookie.bookie_id} names port 0 (stamped by an "
                "earlier bookiesim), not the port this bookie registered with: re-stamp it "
                "with `bookiesim shell updatecookie --set bookiePort=PORT ...` (its id in "
                "the ledgers' ensembles; `bookiesim cluster up` does this for its bookies)"
            )
        return port
    return None


def resolve_cookie_port(cfg: BookieConfig) -> BookieConfig:
    """``cfg`` with ``bookiePort=0`` replaced by the port its cookie names (unchanged when
    the port is configured or there is no cookie yet)."""
    if cfg.bookie_port != 0:
        return cfg
    port = cookie_port(cfg)
    return cfg if port is None else cfg.replace(bookie_port=port)


def expected_cookie(cfg: BookieConfig, instance_id: str | None) -> Cookie:
    """The cookie this configuration stamps and expects."""
    return Cookie.for_bookie(
        cookie_bookie_id(cfg),
        [str(d) for d in cfg.effective_journal_directories],
        [str(d) for d in cfg.ledger_directories],
        index_dirs=[str(d) for d in cfg.index_directories] if cfg.index_directories else None,
        instance_id=instance_id,
    )


def read_dir_cookie(current: Path) -> Cookie | None:
    """The cookie in ``current/VERSION``, or None if there is none."""
    path = current / VERSION_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CookieError(f"{path}: cannot read the cookie: {exc.strerror or exc}") from None
    try:
        return Cookie.decode(data, str(path))
    except CookieFormatError as exc:
        raise CookieError(str(exc)) from None


def write_dir_cookie(current: Path, cookie: Cookie) -> None:
    """Write ``current/VERSION`` durably, replacing any: a crash leaves the old or the new
    cookie, never half of one (upstream writes in place)."""
    current.mkdir(parents=True, exist_ok=True)
    path = current / VERSION_FILE
    tmp = current / f".{VERSION_FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        data = cookie.encode()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(current)


def _mismatch_line(where: str, found: Cookie, mismatches: Sequence[Mismatch]) -> str:
    differences = "; ".join(str(m) for m in mismatches)
    return (
        f"{where}: cookie of bookie {found.bookie_id or '?'} does not match this bookie's "
        f"configuration: {differences}"
    )


def _holds_data(current: Path) -> bool:
    try:
        with os.scandir(current) as entries:
            return any(True for _ in entries)
    except FileNotFoundError:
        return False


async def check_cookies(
    cfg: BookieConfig,
    *,
    store: MetadataStore | None = None,
    ledgers_root: str | None = None,
    instance_id: str | None = None,
    allow_expansion: bool = False,
) -> CookieOutcome:
    """Check (and where new, stamp) the cookies of ``cfg``'s directories and, with a
    ``store``, its cookie there; :class:`CookieError` if the bookie must not start.

    ``instance_id`` is the cluster's (``INSTANCEID``; None without a store).
    """
    expected = expected_cookie(cfg, instance_id)
    dirs = cookie_dirs(cfg)
    node = None
    if store is not None and cfg.bookie_port != 0:
        node = cookie_node(ledgers_root or "/ledgers", expected.bookie_id)
    where_store = f"{store.uri if store is not None else ''} {node}".strip()

    store_cookie: Cookie | None = None
    store_version = ANY_VERSION
    if store is not None and node is not None:
        found = await store.get(node)
        if found is not None:
            try:
                store_cookie = Cookie.decode(found.value, where_store)
            except CookieFormatError as exc:
                raise CookieError(str(exc)) from None
            store_version = found.version
            differences = expected.mismatches(store_cookie, allow_expansion=allow_expansion)
            if differences:
                raise CookieError(_mismatch_line(where_store, store_cookie, differences))

    missing: list[Path] = []
    stamped_dirs: list[Path] = []
    for current in dirs:
        cookie = read_dir_cookie(current)
        if cookie is None:
            missing.append(current)
            continue
        differences = expected.mismatches(cookie, allow_expansion=allow_expansion)
        if differences:
            raise CookieError(_mismatch_line(str(current / VERSION_FILE), cookie, differences))
        stamped_dirs.append(current)

    outcome = CookieOutcome()
    if missing:
        with_data = [d for d in missing if _holds_data(d)]
        # The truth about this bookie: the store's cookie, or without one the dirs' own.
        known = store_cookie is not None or (node is None and bool(stamped_dirs))
        if known:
            # Upstream's storage expansion: only new, empty directories may join; one that
            # a cookie already names lost its cookie (and its data).
            truth = store_cookie if store_cookie is not None else read_dir_cookie(stamped_dirs[0])
            named = set(truth.ledger_dir_paths()) if truth is not None else set()
            if truth is not None and truth.index_dirs:
                named.update(decode_dir_paths(truth.index_dirs))
            lost = [d for d in missing if str(d.parent) in named]
            if not allow_expansion or with_data or lost:
                raise CookieError(
                    f"{', '.join(map(str, missing))}: no cookie ({VERSION_FILE}) in "
                    f"{'this directory' if len(missing) == 1 else 'these directories'}, "
                    f"but this bookie ({expected.bookie_id}) has one in "
                    f"{where_store if store_cookie is not None else stamped_dirs[0]}: a "
                    "replaced or wiped disk, or a directory added to the configuration; "
                    "`bookiesim shell updatecookie` re-stamps on purpose"
                )
        elif with_data and stamped_dirs:
            raise CookieError(
                f"{', '.join(map(str, with_data))}: holds data but no cookie, while "
                f"{stamped_dirs[0]} has one: not the directories of one new bookie"
            )
        elif with_data:
            # Exactly what the previous bookiesim left: data, and no cookie anywhere.
            log.warning(
                "adopting directories written before cookies were stamped (no cookie in "
                "them or in the store): %s; stamping cookies for %s",
                ", ".join(map(str, with_data)),
                expected.bookie_id,
            )
            padded = pad_index_files(cfg.effective_index_directories)
            if padded:
                log.warning("padded %d index files to whole pages", len(padded))
            outcome.adopted = True
        outcome.stamped = list(missing)
        for current in missing:
            write_dir_cookie(current, expected)
        if store is not None and node is not None:
            outcome.stamped_store = node
            await _write_store_cookie(store, node, expected, store_version, store_cookie)
        log.info(
            "stamped cookies for %s in %s%s",
            expected.bookie_id,
            ", ".join(map(str, missing)),
            f" and {node}" if outcome.stamped_store else "",
        )
    elif store is not None and node is not None and store_cookie is None:
        raise CookieError(
            f"{where_store}: no cookie in the metadata store for bookie {expected.bookie_id}, "
            f"though its directories have one ({dirs[0] / VERSION_FILE}): it was removed "
            "from this cluster, or the directories belong to another; "
            "`bookiesim shell updatecookie` re-stamps on purpose"
        )
    return outcome


async def _write_store_cookie(
    store: MetadataStore,
    node: str,
    cookie: Cookie,
    version: int,
    existing: Cookie | None,
) -> None:
    data = cookie.encode()
    if existing is None:
        try:
            await store.create(node, data, make_parents=True)
        except NodeExistsError:
            raise CookieError(
                f"{store.uri} {node}: another process stamped a cookie for this bookie id "
                "at the same time"
            ) from None
    elif existing != cookie:
        await store.set(node, data, version)


async def stamp_cookies(
    cfg: BookieConfig,
    *,
    store: MetadataStore | None = None,
    ledgers_root: str | None = None,
    instance_id: str | None = None,
) -> tuple[Cookie, list[Path], str | None]:
    """Stamp the configuration's cookie into every directory and the store, replacing what
    is there (``bookiesim shell updatecookie``: directories moved on purpose). Returns the
    cookie, the directories and the node written. ``bookiePort=0`` keeps the port the
    directories' cookie names (the bookie's id); with no such cookie it is refused."""
    cfg = resolve_cookie_port(cfg)
    if cfg.bookie_port == 0:
        raise CookieError(
            "bookiePort=0 and no cookie in the directories names a port: set bookiePort to "
            "the port this bookie registers with"
        )
    cookie = expected_cookie(cfg, instance_id)
    dirs = cookie_dirs(cfg)
    for current in dirs:
        write_dir_cookie(current, cookie)
    node = None
    if store is not None and cfg.bookie_port != 0:
        node = cookie_node(ledgers_root or "/ledgers", cookie.bookie_id)
        found = await store.get(node)
        if found is None:
            await store.create(node, cookie.encode(), make_parents=True)
        else:
            await store.set(node, cookie.encode(), found.version)
    return cookie, dirs, node
