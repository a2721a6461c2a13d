"""``metadataServiceUri`` → an open store: the one place that knows every backend.

Everything else (bookie, client, CLI, tests) calls :func:`open_store` and works with the
:class:`~bookiesim.metadata.store.MetadataStore` it yields, so a deployment moves from the
embedded store to ZooKeeper by changing one configuration key.
"""

from __future__ import annotations

import re
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

from bookiesim.metadata.errors import InvalidUriError
from bookiesim.metadata.sqlite_store import DEFAULT_POLL_INTERVAL, open_sqlite_store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from bookiesim.metadata.store import MetadataStore

__all__ = ["DEFAULT_SESSION_TIMEOUT", "open_store", "scheme_of"]

DEFAULT_SESSION_TIMEOUT: Final = 10.0
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


def scheme_of(uri: str) -> str:
    """``"sqlite"`` or ``"zk"`` (``zk+<manager>`` counts as ``zk``); else ``InvalidUriError``."""
    m = _SCHEME.match(uri)
    scheme = m.group(1).lower() if m else ""
    if scheme == "sqlite":
        return "sqlite"
    if scheme == "zk" or scheme.startswith("zk+"):
        return "zk"
    if not uri:
        raise InvalidUriError("no metadataServiceUri given (expected sqlite:///path or zk://...)")
    raise InvalidUriError(
        f"unsupported metadataServiceUri {uri!r}: expected sqlite:///abs/path.db, "
        "sqlite:relative/path.db or zk://host:port[,host:port]/ledgers (the path is the "
        "ledgers root)"
    )


@asynccontextmanager
async def open_store(
    uri: str,
    *,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    poll_interval: float | None = None,
    connect_timeout: float | None = None,
    cwd: Path | None = None,
    chroot: str = "",
) -> AsyncIterator[MetadataStore]:
    """Open the store ``uri`` names for the duration of the ``async with``; close it after.

    ``session_timeout`` bounds how long ephemerals (bookie registrations) outlive a dead
    process. ``poll_interval`` is the SQLite change-poll period; ``connect_timeout`` how long
    to wait for a ZooKeeper server; ``cwd`` resolves relative ``sqlite:`` paths; ``chroot``
    puts a ZooKeeper store's whole tree under that path (tests and experiments sharing one
    ZooKeeper; not part of the URI). Options that do not apply to the URI's backend are
    ignored.

    The store's :attr:`~bookiesim.metadata.store.MetadataStore.ledgers_root` is where the
    cluster lives (the ``zk://`` URI's path; ``/ledgers`` for SQLite). Opening checks
    nothing there: bookies call :func:`~bookiesim.metadata.cluster.ensure_cluster`, clients
    :func:`~bookiesim.metadata.cluster.require_cluster`.
    """
    if scheme_of(uri) == "sqlite":
        async with open_sqlite_store(
            uri,
            session_timeout=session_timeout,
            poll_interval=poll_interval if poll_interval is not None else DEFAULT_POLL_INTERVAL,
            cwd=cwd,
        ) as sqlite_store:
            yield sqlite_store
    else:
        # Imported here so that processes on the embedded store never load kazoo.
        from bookiesim.metadata.zk_store import DEFAULT_CONNECT_TIMEOUT, open_zk_store

        async with open_zk_store(
            uri,
            session_timeout=session_timeout,
            connect_timeout=connect_timeout
            if connect_timeout is not None
            else DEFAULT_CONNECT_TIMEOUT,
            chroot=chroot,
        ) as zk_store:
            yield zk_store
