"""The floor under a bookie's latency: its connection handling and group wait, no storage.

``python -m bookiesim.bench.transport_floor [--set key=value ...]`` serves the
bookie's own :class:`~bookiesim.bookie.server.BookieServer` (framing, parsing, pipelining,
the hand-encoded AddResponse, the same process settings) with a processor that stores
nothing. An add is answered when its group closes by the journal's rule with nothing to
write or sync: once the group's oldest add has waited ``journalMaxGroupWaitMSec``, or, with
``journalFlushWhenQueueEmpty=true`` (or a wait of 0), as soon as the loop gets to it. Only
those two keys and ``nettyMaxFrameSizeBytes`` matter; any other bookie key is accepted and
ignored. It prints ``{"bookiePort": N, "pid": P}`` when ready and stops on SIGINT or SIGTERM.

``bookiesim bench bookie`` runs its load client against this at the half-peak rate: with
the same client, process, machine and group wait, no bookie could show a lower p99, whatever
its journal and storage do. Other operations are answered with EBADREQ.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie import exit_codes
from bookiesim.bookie.config import BookieConfig, ConfigError
from bookiesim.bookie.ledger_storage import entry_header
from bookiesim.bookie.process import GIL_SWITCH_INTERVAL
from bookiesim.bookie.server import BookieServer
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import encode_add_response

if TYPE_CHECKING:
    from bookiesim.bookie.handlers import Respond
    from bookiesim.proto.v3_add import AddFields


class NoStorageProcessor:
    """Answers adds in groups, by the journal's group-wait rule, storing nothing."""

    def __init__(self, max_group_wait: float, *, flush_when_queue_empty: bool) -> None:
        self.max_group_wait = 0.0 if flush_when_queue_empty else max_group_wait
        self._group: list[tuple[Respond, int, int, int]] = []
        self._opened_at = 0.0
        self._wake = trio.Event()
        self.groups = 0

    def throttle(self) -> None:
        return None  # it stores nothing

    def needs_task(self, request: pb.Request) -> bool:
        return False

    def process(self, request: pb.Request, respond: Respond) -> None:
        header = request.header
        if header.operation != pb.ADD_ENTRY or not request.HasField("addRequest"):
            respond(
                pb.Response(
                    header=pb.BKPacketHeader(
                        version=header.version, operation=header.operation, txnId=header.txnId
                    ),
                    status=pb.EBADREQ,
                )
            )
            return
        self._hold(request.addRequest.body, header.txnId, respond)

    def process_add(self, frame: bytes, add: AddFields, respond: Respond) -> None:
        self._hold(add.body, add.txn_id, respond)

    def _hold(self, body: bytes, txn_id: int, respond: Respond) -> None:
        # Ids from the body, as the bookie takes them: the same parsing cost per add.
        ids = entry_header(body)
        if not self._group:
            self._opened_at = trio.current_time()
            self._wake.set()
        self._group.append((respond, txn_id, ids.ledger_id, ids.entry_id))

    async def process_waiting(self, request: pb.Request, respond: Respond) -> None:
        raise AssertionError("needs_task is never true here")

    async def run(self) -> None:
        """Close a group when its oldest add has waited ``max_group_wait``; forever."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if self.max_group_wait > 0:
                await trio.sleep_until(self._opened_at + self.max_group_wait)
            group, self._group = self._group, []
            self.groups += 1
            for respond, txn_id, ledger_id, entry_id in group:
                respond(encode_add_response(txn_id, pb.EOK, ledger_id, entry_id))


async def serve(cfg: BookieConfig, host: str = "127.0.0.1", port: int = 0) -> None:
    """Serve until SIGINT or SIGTERM, announcing the port on stdout."""
    processor = NoStorageProcessor(
        cfg.journal_max_group_wait_msec / 1000,
        flush_when_queue_empty=cfg.journal_flush_when_queue_empty,
    )
    server = BookieServer(processor, max_frame_size=cfg.netty_max_frame_size_bytes)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(processor.run)
            bound = await nursery.start(server.serve, host, port)
            gc.freeze()  # as the bookie process does once it serves
            print(json.dumps({"bookiePort": bound, "pid": os.getpid()}), flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0 = a free port (default)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a bookie setting"
    )
    args = parser.parse_args(argv)
    try:
        cfg = BookieConfig.from_properties("", source="--set", overrides=args.set)
    except ConfigError as exc:
        print(f"transport floor: {exc}", file=sys.stderr)
        return exit_codes.BAD_CONFIGURATION
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    trio.run(serve, cfg, "127.0.0.1", args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
