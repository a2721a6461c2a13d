"""Whose bookies a run's cluster holds (``chaos run --cluster``), node by node (sans-IO).

* ``bookiesim``: every bookie is bookiesim's;
* ``upstream``: every bookie is upstream's ``server.Main``;
* ``mixed``: upstream's in the odd nodes (``b1``, ``b3``, ...), bookiesim's in the even ones,
  so that every ensemble of two or more holds both kinds once a bookie of each is up.

Upstream's bookie reads its metadata service from ``metadataServiceUri`` with the servers
separated by ``;`` (``zk+hierarchical://zk1:2181;zk2:2181/ledgers``), where bookiesim's
URIs use ``,``: :func:`upstream_metadata_uri` turns one into the other.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

__all__ = ["CLUSTERS", "BookieKind", "bookie_kinds", "upstream_metadata_uri"]

BookieKind = Literal["bookiesim", "upstream"]
CLUSTERS: dict[str, str] = {
    "bookiesim": "every bookie is bookiesim's",
    "upstream": "every bookie is upstream's (needs an installation and --metadata zk)",
    "mixed": "upstream's bookies in b1, b3, ..., bookiesim's in b2, b4, ... (needs an "
    "installation and --metadata zk)",
}


def bookie_kinds(cluster: str, nodes: list[str]) -> dict[str, BookieKind]:
    """The program of each bookie node; ``ValueError`` (one line) for an unknown cluster."""
    if cluster not in CLUSTERS:
        raise ValueError(f"unknown cluster {cluster!r}: choose from {', '.join(CLUSTERS)}")
    kinds: dict[str, BookieKind] = {}
    for index, node in enumerate(nodes):
        upstream = cluster == "upstream" or (cluster == "mixed" and index % 2 == 0)
        kinds[node] = "upstream" if upstream else "bookiesim"
    return kinds


def upstream_metadata_uri(uri: str) -> str:
    """bookiesim's ``zk://h1:2181,h2:2181/ledgers`` as upstream writes it:
    ``zk+hierarchical://h1:2181;h2:2181/ledgers``. ``ValueError`` for a store upstream's
    bookie cannot use (SQLite)."""
    parts = urlsplit(uri)
    if parts.scheme not in ("zk", "zk+hierarchical", "zk+longhierarchical", "zk+flat"):
        raise ValueError(
            f"upstream's bookies need ZooKeeper as the metadata store, not {parts.scheme}: "
            "give --metadata zk"
        )
    scheme = "zk+hierarchical" if parts.scheme == "zk" else parts.scheme
    return f"{scheme}://{parts.netloc.replace(',', ';')}{parts.path}"
