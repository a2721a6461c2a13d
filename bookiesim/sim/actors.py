"""The workload: clients that write, recover, read and delete ledgers through the real client.

Every client is a :class:`~bookiesim.client.BookKeeper` of its own, with its own name on the
network (partitions and skew apply per client), its own recording view of the store and its
own seed. Writers run by themselves; recoveries, reads and deletes are plan steps.

Payloads name their ledger and entry id (and are padded to a length drawn from both), so any
copy of an entry anywhere can be checked against what its writer sent (invariants S4).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from bookiesim.client.bookkeeper import BookKeeper, ClientConfig, EnsembleProposal
from bookiesim.client.errors import BKError
from bookiesim.metadata.errors import MetadataError
from bookiesim.sim.history import History, WriterRecord
from bookiesim.sim.store import RecordingStore

if TYPE_CHECKING:
    import random
    from collections.abc import Awaitable, Callable

    from bookiesim.client.ledger_handle import AddFuture, LedgerHandle
    from bookiesim.sim.sim_cluster import SimCluster

__all__ = ["ClientActor", "Writer", "WriterSettings", "payload"]

_Failure = (BKError, MetadataError, trio.TooSlowError)


def payload(ledger_id: int, entry_id: int) -> bytes:
    """The payload a writer sends as ``entry_id`` of ``ledger_id`` (16 to 200 bytes)."""
    head = f"L{ledger_id}E{entry_id}:".encode()
    pad = hashlib.blake2b(head, digest_size=8).digest()
    size = 16 + int.from_bytes(pad[:2], "big") % 185
    return (head + pad * 26)[:size] if size > len(head) else head


class _Proposals(list[EnsembleProposal]):
    """Stands in for the client's bounded deque of proposals, telling the history about
    each one when it is made (S5 compares it with the metadata of that moment)."""

    def __init__(self, history: History, client: str) -> None:
        super().__init__()
        self.history = history
        self.client = client

    def append(self, proposal: EnsembleProposal) -> None:
        self.history.proposed(self.client, proposal)
        if len(self) > 100:
            del self[:50]
        super().append(proposal)


class ClientActor:
    """One named client, open for the whole run; tasks started with :meth:`spawn` run in
    the client's nursery and end with it."""

    def __init__(self, cluster: SimCluster, name: str, config: ClientConfig) -> None:
        self.cluster = cluster
        self.name = name
        self.config = config
        self.bk: BookKeeper | None = None
        self._nursery: trio.Nursery | None = None
        self._scope = trio.CancelScope()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        store = RecordingStore(self.cluster.store, self.name, self.cluster.history)
        with self._scope:
            async with BookKeeper(
                store,
                bookie_connector=self.cluster.net.connector(self.name),
                config=self.config,
            ) as bk:
                bk.stats.proposals = _Proposals(self.cluster.history, self.name)  # type: ignore[assignment]
                self.bk = bk
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    task_status.started()
                    await trio.sleep_forever()

    def spawn(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    def stop(self) -> None:
        self._scope.cancel()

    @property
    def trace(self) -> Callable[[str], None]:
        return self.cluster.history.trace

    # -- one-off operations (plan steps) ---------------------------------------------------

    async def recover(self, ledger_id: int, after: float = 0.0) -> bool:
        assert self.bk is not None
        await trio.sleep(after)
        self.trace(f"{self.name}: recovering ledger {ledger_id}")
        try:
            with trio.fail_after(60):
                handle = await self.bk.open_ledger(ledger_id, recovery=True)
        except _Failure as exc:
            self.trace(f"{self.name}: recovery of {ledger_id} failed: {_short(exc)}")
            return False
        last = handle.metadata.last_entry_id
        self.trace(f"{self.name}: ledger {ledger_id} recovered, last entry {last}")
        return True

    async def read(self, ledger_id: int, *, must_succeed: bool = False) -> None:
        """Read the ledger (closed: to its last entry; open: to the LAC) and check every
        payload (S4) and that nothing past a closed ledger's end comes back (S7b)."""
        assert self.bk is not None
        history = self.cluster.history
        try:
            with trio.fail_after(60):
                handle = await self.bk.open_ledger(ledger_id)
                closed = handle.is_closed
                last = handle.metadata.last_entry_id if closed else handle.last_add_confirmed
                entries = await handle.read_entries(0, last) if last >= 0 else []
        except _Failure as exc:
            if must_succeed:
                history.violation("S2", f"ledger {ledger_id} could not be read back: {_short(exc)}")
            else:
                self.trace(f"{self.name}: read of {ledger_id} failed: {_short(exc)}")
            return
        for entry in entries:
            if entry.payload != payload(ledger_id, entry.entry_id):
                history.violation("S4", f"ledger {ledger_id} entry {entry.entry_id} read wrong")
            if closed and entry.entry_id > last:
                history.violation(
                    "S7b", f"read of closed ledger {ledger_id} returned {entry.entry_id}"
                )
        state = "closed" if closed else "open"
        self.trace(f"{self.name}: read ledger {ledger_id} ({len(entries)} entries, {state})")

    async def delete(self, ledger_id: int) -> None:
        assert self.bk is not None
        try:
            await self.bk.delete_ledger(ledger_id)
        except _Failure as exc:
            self.trace(f"{self.name}: delete of {ledger_id} failed: {_short(exc)}")


@dataclass(frozen=True)
class WriterSettings:
    shapes: tuple[tuple[int, int, int], ...]
    entries: tuple[int, int] = (5, 60)
    mean_gap: float = 0.03
    window: int = 8
    close_probability: float = 0.8


class Writer(ClientActor):
    """Creates ledgers one after the other and writes each, pipelined; usually closes it.

    :meth:`stop_mid_stream` turns it into a zombie: it adds nothing more and never closes,
    but its client stays up, so adds already sent may still be acknowledged later — the
    writer of upstream #2614."""

    def __init__(
        self,
        cluster: SimCluster,
        name: str,
        config: ClientConfig,
        settings: WriterSettings,
        rng: random.Random,
    ) -> None:
        super().__init__(cluster, name, config)
        self.settings = settings
        self.rng = rng
        self.zombie = False
        self.current: LedgerHandle | None = None
        self.finished = False

    def stop_mid_stream(self) -> None:
        self.zombie = True

    def is_zombie(self) -> bool:
        return self.zombie

    async def _write_ledger(self, lh: LedgerHandle, count: int, stopping: trio.Event) -> None:
        """Add ``count`` entries, at most ``window`` unacknowledged at a time."""
        window: deque[AddFuture] = deque()
        for _ in range(count):
            while len(window) >= self.settings.window:
                with contextlib.suppress(BKError):
                    await window.popleft().result()
            if lh.error is not None or self.zombie or stopping.is_set():
                return
            try:
                window.append(lh.append_async(payload(lh.ledger_id, lh.last_add_pushed + 1)))
            except BKError:
                return
            await trio.sleep(self.rng.expovariate(1 / self.settings.mean_gap))

    async def write_forever(self, stopping: trio.Event) -> None:
        while not stopping.is_set() and not self.zombie:
            await self.write_ledger(stopping)
        self.finished = True

    async def write_ledger(self, stopping: trio.Event, entries: int | None = None) -> None:
        """Create one ledger, write ``entries`` entries (else a count drawn from the
        settings) and usually close it."""
        history = self.cluster.history
        rng = self.rng
        s = self.settings
        assert self.bk is not None
        live = len(await self.bk.live_bookies())
        shapes = [shape for shape in s.shapes if shape[0] <= live] or [(1, 1, 1)]
        shape = rng.choice(shapes)
        try:
            lh = await self.bk.create_ledger(*shape)
        except _Failure as exc:
            self.trace(f"{self.name}: create failed: {_short(exc)}")
            await trio.sleep(1.0)
            return
        self.current = lh
        history.writers[lh.ledger_id] = WriterRecord(self.name, lh)
        self.trace(
            f"{self.name}: created ledger {lh.ledger_id} E/Qw/Qa={shape} on {list(lh.ensemble)}"
        )
        count = rng.randint(*s.entries) if entries is None else entries
        await self._write_ledger(lh, count, stopping)
        if self.is_zombie():
            self.trace(
                f"{self.name}: stopped mid-stream on ledger {lh.ledger_id} "
                f"(pushed {lh.last_add_pushed}, LAC {lh.last_add_confirmed})"
            )
            return
        if lh.error is None and rng.random() < s.close_probability:
            try:
                with trio.fail_after(60):
                    await lh.close()
            except _Failure as exc:
                self.trace(f"{self.name}: close of {lh.ledger_id} failed: {_short(exc)}")
        else:
            why = "left open" if lh.error is None else f"gave up: {_short(lh.error)}"
            self.trace(f"{self.name}: ledger {lh.ledger_id} {why} at LAC {lh.last_add_confirmed}")


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:120]}"
