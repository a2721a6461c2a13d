"""``bookiesim shell updatecookie``: re-stamp a bookie's cookies after moving it on purpose.

Why: a bookie refuses to start when its cookies do not match its configuration (see
:mod:`bookiesim.bookie.cookie_check`). When the change is intended (directories moved to
another path, a disk replaced and its data restored, the bookie moved to another cluster),
this command is how the operator says so, like upstream's ``bookkeeper shell updatecookie``
/ ``cookie update``: it writes the configured bookie's cookie (bookie id, directories, the
cluster's instance id) into every configured directory and into the metadata store.

It refuses while a bookie with that id is registered: re-stamping under a running bookie
would hide exactly the mistake cookies exist to catch.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.config import BookieConfig, ConfigError
from bookiesim.bookie.cookie_check import (
    CookieError,
    cookie_bookie_id,
    resolve_cookie_port,
    stamp_cookies,
)
from bookiesim.cli.bookie_command import add_config_arguments, config_from_args
from bookiesim.metadata import open_store
from bookiesim.metadata.cluster import ensure_cluster, ledgers_root_of
from bookiesim.metadata.errors import MetadataError
from bookiesim.metadata.registration import registered_bookies

if TYPE_CHECKING:
    import argparse

__all__ = ["EXIT_REFUSED", "UpdateRefusedError", "register_cookie_commands", "update_cookies"]

EXIT_REFUSED = 2


class UpdateRefusedError(Exception):
    """The cookies must not be re-stamped now; the message says why."""


def register_cookie_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "updatecookie",
        help="re-stamp a bookie's cookies for its current configuration (after a move)",
        description="Write the configured bookie's cookie (bookie id, journal, ledger and "
        "index directories, the cluster's INSTANCEID) into current/VERSION of every "
        "configured directory and into the metadata store's cookies/<bookie id>, replacing "
        "what is there. Refused (exit code 2) while a bookie with that id is registered.",
    )
    add_config_arguments(parser)
    parser.set_defaults(func=_updatecookie)


def _updatecookie(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
        lines = trio.run(update_cookies, cfg)
    except (ConfigError, UpdateRefusedError, MetadataError, CookieError) as exc:
        print(f"bookiesim shell updatecookie: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except OSError as exc:
        where = exc.filename or ""
        print(f"bookiesim shell updatecookie: {where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_REFUSED
    for line in lines:
        print(line)
    return 0


async def update_cookies(cfg: BookieConfig) -> list[str]:
    """Stamp ``cfg``'s cookie everywhere; the lines to print (what was written).
    ``bookiePort=0`` keeps the port the directories' cookie names (the bookie's id)."""
    cfg = resolve_cookie_port(cfg)
    if cfg.bookie_port == 0:
        raise UpdateRefusedError(
            "bookiePort=0 and no cookie in the directories names a port: set bookiePort to "
            "the port this bookie registers with"
        )
    bookie_id = cookie_bookie_id(cfg)
    if not cfg.metadata_service_uri:
        _, dirs, _ = await stamp_cookies(cfg)
        return [f"stamped {d / 'VERSION'}" for d in dirs]
    async with open_store(cfg.metadata_service_uri) as store:
        root = ledgers_root_of(store)
        registered = await registered_bookies(store, root)
        if bookie_id in registered:
            raise UpdateRefusedError(
                f"bookie {bookie_id} is registered in {cfg.metadata_service_uri} (it is "
                "running): stop it before re-stamping its cookies"
            )
        instance = await ensure_cluster(store)
        _, dirs, node = await stamp_cookies(
            cfg, store=store, ledgers_root=root, instance_id=instance
        )
    lines = [f"stamped {d / 'VERSION'}" for d in dirs]
    if node is not None:
        lines.append(f"stamped {cfg.metadata_service_uri} {node}")
    return lines
