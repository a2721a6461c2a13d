"""``bookiesim autorecovery --conf FILE [--set key=value ...]``: auto-recovery alone.

Upstream's ``AutoRecoveryMain`` (``bin/bookkeeper autorecovery``): the auditor election and
one replication worker in a process of their own, for clusters whose bookies do not run it
(``autoRecoveryDaemonEnabled=false``). It reads the same configuration as a bookie (the same
``--conf``/``--set``): ``metadataServiceUri`` and the auto-recovery keys, and votes with the id
the file would give a bookie (``bookieAddress:bookiePort``, ``127.0.0.1:3181`` by default;
set ``bookiePort`` to tell several apart). It serves ``/metrics`` (its own registry) and the
``/api/v1/autorecovery/...`` routes on ``httpServerHost:httpServerPort``.

When it runs, one JSON line goes to stdout (``bookieId``, ``httpServerPort``, ``pid``,
``metrics``), like a bookie's. SIGINT or SIGTERM stop it (exit 0): its vote and any lock it
held vanish with its session, so another service takes over. A bad configuration is one
line on stderr and exit 2; a store that cannot be reached, exit 1.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

import trio

from bookiesim.autorecovery.service import AutoRecoveryService
from bookiesim.bookie import exit_codes
from bookiesim.bookie.config import ConfigError
from bookiesim.bookie.http_admin import AdminRouter, metrics_handler, serve_admin
from bookiesim.bookie.http_upstream_routes import answer_wrong_methods_as_upstream
from bookiesim.bookie.process import LOG_FORMAT
from bookiesim.bookie.upstream_keys import not_applied_warning
from bookiesim.cli.bookie_command import add_config_arguments, config_from_args
from bookiesim.cli.client_actions import expected_error
from bookiesim.metadata.errors import MetadataError

if TYPE_CHECKING:
    import argparse

    from bookiesim.bookie.config import BookieConfig

__all__ = ["register", "run_until_signalled"]

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "autorecovery",
        help="run auto-recovery alone (auditor election and a replication worker)",
        description=(
            "Run auto-recovery in a process of its own, as upstream's AutoRecoveryMain: the "
            "auditor election and one replication worker on the cluster of metadataServiceUri. "
            "When it runs, one JSON line goes to stdout with bookieId, httpServerPort, pid and "
            "metrics; SIGINT/SIGTERM stop it. Exit code 2 for a bad configuration, 1 when the "
            "metadata store cannot be reached."
        ),
    )
    add_config_arguments(parser)
    parser.set_defaults(func=run)


async def run_until_signalled(
    cfg: BookieConfig,
    *,
    announce: bool = True,
    task_status: trio.TaskStatus[AutoRecoveryService] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve auto-recovery and its admin HTTP until SIGINT or SIGTERM."""
    service = AutoRecoveryService.from_bookie_config(cfg)
    router = AdminRouter()
    router.add("GET", "/metrics", metrics_handler(service.metrics.render))
    service.add_routes(router)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            http_port = await nursery.start(
                serve_admin, router, cfg.http_server_host, cfg.http_server_port
            )
            await nursery.start(service.run)
            answer_wrong_methods_as_upstream(router)
            task_status.started(service)
            if announce:
                ready = {
                    "bookieId": service.bookie_id,
                    "httpServerPort": http_port,
                    "pid": os.getpid(),
                    "metrics": f"http://{cfg.http_server_host}:{http_port}/metrics",
                    "metadataServiceUri": cfg.metadata_service_uri,
                }
                print(json.dumps(ready), flush=True)
            async for signum in signals:
                log.info("received %s, stopping", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


def run(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
    except (ConfigError, OSError) as exc:
        print(f"bookiesim autorecovery: {exc}", file=sys.stderr)
        return exit_codes.BAD_CONFIGURATION
    if not cfg.metadata_service_uri:
        print(
            "bookiesim autorecovery: no metadataServiceUri: say which cluster to look after",
            file=sys.stderr,
        )
        return exit_codes.BAD_CONFIGURATION
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)
    ignored = not_applied_warning(cfg.not_applied)  # as the bookie says it
    if ignored is not None:
        log.warning("%s", ignored)
    try:
        trio.run(run_until_signalled, cfg)
    except BaseException as exc:
        error = expected_error(exc, (MetadataError, OSError))
        if error is None:
            raise
        print(f"bookiesim autorecovery: {error}", file=sys.stderr)
        return 1
    return exit_codes.OK
