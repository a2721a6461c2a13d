"""Where the shell's cluster verbs find their cluster, as upstream's shell does: a
``bk_server.conf`` (``-conf FILE``, before or after the verb; its ``metadataServiceUri``, or
the legacy ``zkServers``/``zkLedgersRootPath``), or bookiesim's ``--metadata URI`` and
``--cluster DIR``.

The verbs that read a bookie's own directories or talk to the local bookie
(``listfilesondisc``, ``bookiesanity``, ``readlog`` by id) need the configuration itself;
:func:`bookie_conf` refuses them without one. Every verb runs through :func:`run_verb`:
bad input is one line and exit 2, a cluster that cannot be reached or an operation that
fails is one line and exit 1, never a traceback.
"""

from __future__ import annotations

import socket
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.config import BookieConfig, ConfigError
from bookiesim.cli.client_actions import (
    Action,
    CommandError,
    cluster_tls,
    metadata_uri,
    run_action,
)
from bookiesim.client import BookKeeper, ClientConfig
from bookiesim.metadata.cluster import require_cluster
from bookiesim.metadata.registration import bookie_address

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator

    from bookiesim.metadata.store import MetadataStore

__all__ = [
    "UNKNOWN",
    "add_conf_argument",
    "add_target_arguments",
    "bookie_conf",
    "bookie_line",
    "cluster_client",
    "conf_path",
    "run_verb",
    "verb_parser",
]

UNKNOWN = "UNKNOWN"
"""What upstream prints for an address or host name it cannot tell."""

CONNECT_TIMEOUT = 5.0


def add_conf_argument(parser: argparse.ArgumentParser, dest: str = "conf") -> None:
    parser.add_argument(
        "-conf",
        "--conf",
        dest=dest,
        metavar="FILE",
        help="a bk_server.conf (upstream's keys): the cluster's metadataServiceUri (or "
        "zkServers), the bookie's directories and address",
    )


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """``-conf FILE`` | ``--metadata URI`` | ``--cluster DIR``, and ``-v``."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "-conf",
        "--conf",
        dest="conf",
        metavar="FILE",
        help="a bk_server.conf (upstream's keys): its metadataServiceUri, or zkServers",
    )
    where.add_argument("--metadata", metavar="URI", help="metadata store (sqlite:///… or zk://…)")
    where.add_argument("--cluster", type=Path, metavar="DIR", help="a `cluster up` directory")
    parser.add_argument("-v", "--verbose", action="store_true", help="the libraries' log")


def verb_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_text: str,
    *,
    add_help: bool = True,
) -> argparse.ArgumentParser:
    """A verb's parser; no abbreviations, since upstream's single-dash names (``-rw``,
    ``-le``) would otherwise be taken as prefixes of each other. ``add_help=False`` leaves
    ``-h`` to the verb (``listbookies -h`` is upstream's ``--hostnames``); ``--help``
    stays."""
    parser = commands.add_parser(
        name, help=help_text, description=help_text, allow_abbrev=False, add_help=add_help
    )
    if not add_help:
        parser.add_argument("--help", action="help", help="show this help message and exit")
    return parser


def conf_path(args: argparse.Namespace) -> str | None:
    """``-conf`` given after the verb, else before it (``shell -conf FILE VERB``)."""
    after = getattr(args, "conf", None)
    before = getattr(args, "shell_conf", None)
    if after and before and after != before:
        raise CommandError(f"two configurations: -conf {before} and -conf {after}")
    return after or before


def _load(path: str) -> BookieConfig:
    try:
        return BookieConfig.from_file(path)
    except (ConfigError, OSError) as exc:
        raise CommandError(f"-conf {path}: {exc}") from None


def bookie_conf(args: argparse.Namespace, verb: str) -> BookieConfig:
    """The configuration ``-conf`` names; a verb that reads the bookie's own directories
    cannot do without one."""
    path = conf_path(args)
    if path is None:
        raise CommandError(f"{verb} reads a bookie's directories: give its -conf FILE")
    return _load(path)


def store_uri(args: argparse.Namespace) -> str:
    path = conf_path(args)
    if path is not None:
        if getattr(args, "metadata", None) or getattr(args, "cluster", None):
            raise CommandError("-conf and --metadata/--cluster name two clusters: give one")
        uri = _load(path).metadata_service_uri
        if not uri:
            raise CommandError(f"-conf {path}: no metadataServiceUri (nor zkServers) in it")
        return uri
    if not getattr(args, "metadata", None) and getattr(args, "cluster", None) is None:
        raise CommandError("say where the cluster is: -conf FILE, --metadata URI or --cluster DIR")
    return metadata_uri(args)


@asynccontextmanager
async def cluster_client(
    args: argparse.Namespace, *, request_timeout: float = 10.0
) -> AsyncIterator[BookKeeper]:
    """bookiesim's client on the cluster; a root with no cluster in it is refused."""
    config = ClientConfig(
        request_timeout=request_timeout,
        connect_timeout=min(CONNECT_TIMEOUT, request_timeout),
        tls=cluster_tls(args),
    )
    async with BookKeeper.open(store_uri(args), config=config) as bk:
        await require_cluster(bk.store, bk.ledgers_root)
        yield bk


def run_verb(fn: Action, args: argparse.Namespace) -> int:
    return run_action(fn, args, f"bookiesim shell {args.shell_command}", (OSError,))


# -- how upstream names a bookie ----------------------------------------------------------


def _is_ip(text: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, text)
        except OSError:
            continue
        return True
    return False


def _describe_address(host: str) -> tuple[str, str]:
    """(ip, host name) as upstream prints them: an IP's canonical name by reverse lookup
    (the IP itself when there is none), a host name's address by forward lookup."""
    if _is_ip(host):
        try:
            return host, socket.gethostbyaddr(host)[0]
        except OSError:
            return host, host
    try:
        return socket.gethostbyname(host), host
    except OSError:
        return UNKNOWN, host


async def bookie_line(store: MetadataStore, bookie_id: str, root: str | None = None) -> str:
    """``BookieID:ID, IP:ADDR, Port:N, Hostname:NAME``, upstream's one-line form of a bookie:
    the address its registration gives (else the one its id names), ``UNKNOWN`` and port 0
    when neither tells."""
    try:
        host, port = await bookie_address(store, bookie_id, root)
    except ValueError:
        return f"BookieID:{bookie_id}, IP:{UNKNOWN}, Port:0, Hostname:{UNKNOWN}"
    ip, name = await trio.to_thread.run_sync(_describe_address, host.strip("[]"))
    return f"BookieID:{bookie_id}, IP:{ip}, Port:{port}, Hostname:{name}"
