"""The cluster under a ledgers root: its identity (``LAYOUT``, ``INSTANCEID``), who creates
it, and how a URI that points at the wrong place is told apart from an empty cluster.

Upstream's ``initnewcluster`` writes both nodes before any bookie starts: ``LAYOUT`` names the
ledger manager (ours is the hierarchical one, as upstream's default), ``INSTANCEID`` is a
random UUID that every bookie's cookie carries, so a bookie's directories cannot be moved
into another cluster by mistake. An upstream client reads ``LAYOUT`` to pick its ledger
manager; an upstream bookie refuses to start where ``INSTANCEID`` is missing.

Who does what here:

* **Bookies** call :func:`ensure_cluster` at start: on an empty root it writes ``LAYOUT``,
  ``INSTANCEID`` and the parents upstream creates (``available``, ``available/readonly``,
  ``cookies``), so a local cluster needs no separate format step. A root that the previous
  bookiesim filled (registrations, ledgers) but without those two nodes — it wrote neither —
  is *adopted*: they are written beside its data, which stays where it is.
* **Clients** call :func:`require_cluster`: a root with no cluster is an error
  (:class:`~bookiesim.metadata.errors.NoClusterError`), since a client that quietly finds no
  bookies and no ledgers at a mistyped path helps nobody.
* Both refuse the previous version's URI form. It read ``zk://host/x`` as a chroot with the
  cluster at ``/x/ledgers``; now (upstream's meaning) the path *is* the ledgers root. So
  where the root holds nothing of a cluster but ``<root>/ledgers`` does, opening fails with
  :class:`~bookiesim.metadata.errors.MovedLedgersRootError` naming the URI to use, instead
  of starting a second, empty cluster beside the data.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from typing import Final

from bookiesim.metadata.errors import (
    MovedLedgersRootError,
    NoClusterError,
    NodeExistsError,
    NoNodeError,
)
from bookiesim.metadata.store import MetadataStore, join_path

__all__ = [
    "INSTANCEID",
    "LAYOUT",
    "LAYOUT_HIERARCHICAL",
    "ensure_cluster",
    "instance_id",
    "ledgers_root_of",
    "refuse_previous_uri_form",
    "require_cluster",
]

log = logging.getLogger(__name__)

LAYOUT: Final = "LAYOUT"
INSTANCEID: Final = "INSTANCEID"
LAYOUT_HIERARCHICAL: Final = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
"""``LAYOUT`` as upstream 4.17.4 writes it: layout format 2, manager class and its version 1,
no trailing newline (63 bytes, recorded in the vectors' ``zk/01``)."""

PREVIOUS_ROOT: Final = "ledgers"
"""Where the previous version kept the cluster, below the URI's path."""

_EMPTY_PARENTS: Final = ("available", "available/readonly", "cookies")
"""Persistent parents upstream's cluster has from the start (vectors, ``zk/01``)."""
_DATA_NODES: Final = frozenset({"available", "idgen", "cookies", "underreplication"})
"""Children that only a cluster that has been used writes (registrations, ids, cookies)."""
_LEDGER_DIR: Final = re.compile(r"\d{2}|\d{3}")
"""First level of the hierarchical ledger paths (``00`` short ids, ``000`` long ones)."""


def ledgers_root_of(store: MetadataStore) -> str:
    """The ledgers root the store was opened for (``metadataServiceUri``'s path)."""
    return store.ledgers_root


async def instance_id(store: MetadataStore, root: str | None = None) -> str | None:
    """The cluster's ``INSTANCEID``, or ``None`` where the root has none."""
    node = await store.get(join_path(_root(store, root), INSTANCEID))
    return None if node is None else node.value.decode("ascii", "replace").strip()


async def ensure_cluster(store: MetadataStore, root: str | None = None) -> str:
    """Make the root a cluster where it is not one yet, and return its instance id.

    Writes what is missing of ``LAYOUT``, ``INSTANCEID`` and the empty parents upstream
    creates; adopts a previous bookiesim's root (module docstring). Two processes racing here
    agree on the instance id that won. Raises ``MovedLedgersRootError`` for the previous
    version's URI form.
    """
    root = _root(store, root)
    names = await _children(store, root)
    if not _has_data(names) and INSTANCEID not in names and LAYOUT not in names:
        await refuse_previous_uri_form(store, root)
    adopting = INSTANCEID not in names and _has_data(names)
    for name in _EMPTY_PARENTS:
        await _create_if_missing(store, join_path(root, name))
    await _create_if_missing(store, join_path(root, LAYOUT), LAYOUT_HIERARCHICAL)
    existing = await instance_id(store, root)
    if existing is not None:
        return existing
    fresh = str(uuid.uuid4())
    try:
        await store.create(join_path(root, INSTANCEID), fresh.encode("ascii"))
    except NodeExistsError:
        won = await instance_id(store, root)
        assert won is not None  # INSTANCEID is never deleted
        return won
    if adopting:
        log.warning(
            "%s: adopted the previous bookiesim cluster at %s (wrote LAYOUT and INSTANCEID %s)",
            store.uri,
            root,
            fresh,
        )
    else:
        log.info("%s: initialised a new cluster at %s: INSTANCEID %s", store.uri, root, fresh)
    return fresh


async def require_cluster(store: MetadataStore, root: str | None = None) -> str:
    """The instance id of the cluster a client was pointed at; raises ``NoClusterError``
    where the root holds none, ``MovedLedgersRootError`` for the previous version's URI
    form. A previous bookiesim's root with data is adopted as :func:`ensure_cluster` does
    (so an upgraded client may come before the upgraded bookies)."""
    root = _root(store, root)
    names = await _children(store, root)
    if INSTANCEID in names:
        found = await instance_id(store, root)
        if found is not None:
            return found
    if _has_data(names):
        return await ensure_cluster(store, root)
    if LAYOUT not in names:
        await refuse_previous_uri_form(store, root)
    raise NoClusterError(store.uri, root)


async def refuse_previous_uri_form(store: MetadataStore, root: str | None = None) -> None:
    """Raise ``MovedLedgersRootError`` if the root holds no cluster but ``<root>/ledgers``
    does — a URI written for the previous version, whose path was a chroot."""
    root = _root(store, root)
    names = await _children(store, root)
    if INSTANCEID in names or LAYOUT in names or _has_data(names):
        return
    old_root = join_path(root, PREVIOUS_ROOT)
    old = await _children(store, old_root)
    if INSTANCEID in old or _has_data(old):
        raise MovedLedgersRootError(
            store.uri, root, old_root, _uri_with_root(store.uri, root, old_root)
        )


def _root(store: MetadataStore, root: str | None) -> str:
    return store.ledgers_root if root is None else root


def _has_data(names: set[str]) -> bool:
    return any(name in _DATA_NODES or _LEDGER_DIR.fullmatch(name) for name in names)


async def _children(store: MetadataStore, path: str) -> set[str]:
    try:
        return set(await store.children(path))
    except NoNodeError:
        return set()


async def _create_if_missing(store: MetadataStore, path: str, value: bytes = b"") -> None:
    if await store.get(path) is None:
        with contextlib.suppress(NodeExistsError):  # another bookie was first: same content
            await store.create(path, value, make_parents=True)


def _uri_with_root(uri: str, root: str, new_root: str) -> str:
    """``uri`` with its ledgers root replaced: the URI to suggest. A URI whose path is not
    the root (the embedded stores, a test's chroot) is named as is, with the root beside."""
    scheme, sep, rest = uri.partition("://")
    if sep and scheme.lower().startswith("zk"):
        authority = rest.partition("/")[0]
        return f"{scheme}://{authority}{new_root}"
    return f"{uri} (ledgers root {new_root})"
