"""Random histories of create / write / close / bookie crash / restart / recover on a real
local cluster, checking after every step that what can be read is what was acknowledged.

Why: the unit scenarios each cover one interleaving; this lets hypothesis look for the ones
nobody thought of, and shrink a failure to a short story. Checked (invariants §4.1):

* S1 — once a ledger is CLOSED at L, its writer never acknowledged (and never will) an id
  above L; acknowledged ids are always the prefix 0..LAC.
* S2/S4 — every acknowledged entry of a closed ledger reads back with the payload the writer
  gave it (payloads name their ledger and entry id).
* S3 — at the end, with every bookie back, each entry 0..L of a closed ledger is stored on at
  least Qa bookies of its write set. (Bookies stop cleanly here, so no fsynced data is lost.)
* S5 — no handle ever gives up because an ensemble change would start below an existing
  segment.

Rules are synchronous; they drive trio code through :class:`TrioThread`.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from bookiesim.client import (
    BKError,
    BookKeeper,
    ClientConfig,
    LedgerClosedError,
    LedgerFencedError,
    LedgerHandle,
    MetadataConflictError,
    NotEnoughBookiesError,
)
from bookiesim.cluster.in_process import LocalCluster, TrioThread, running_cluster
from tests.client.helpers import holders, payload

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from bookiesim.metadata.ledgers import LedgerMetadata

SHAPES = [(3, 2, 2), (3, 3, 2), (2, 2, 2), (3, 2, 1), (4, 3, 2)]
BOOKIES = 5
CONFIG = ClientConfig(seed=11, request_timeout=2.0, connect_timeout=1.0)


@dataclass
class Env:
    cluster: LocalCluster
    writer: BookKeeper
    recoverer: BookKeeper


@asynccontextmanager
async def environment(root: Path) -> AsyncIterator[Env]:
    async with (
        running_cluster(root, BOOKIES) as cluster,
        BookKeeper(cluster.store, config=CONFIG) as writer,
        BookKeeper(cluster.store, config=CONFIG) as recoverer,
    ):
        yield Env(cluster, writer, recoverer)


@dataclass
class LedgerModel:
    handle: LedgerHandle
    acked: list[int] = field(default_factory=list)
    closed_at: int | None = None
    """Last entry id once the metadata is CLOSED (by the writer or a recovery)."""
    recovered: bool = False
    errors: list[BKError] = field(default_factory=list)


class ClusterMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="bk-stateful-"))
        self.driver = TrioThread()
        self.env = self.driver.start(lambda: environment(self.tmp))
        self.ledgers: list[LedgerModel] = []
        self.bookie_ids = self.env.cluster.running_ids()

    # -- helpers ---------------------------------------------------------------------------

    def running(self) -> list[str]:
        return self.env.cluster.running_ids()

    def stopped(self) -> list[str]:
        return [b for b in self.bookie_ids if b not in self.running()]

    def open_ledgers(self) -> list[LedgerModel]:
        return [m for m in self.ledgers if m.closed_at is None and m.handle.error is None]

    # -- rules -------------------------------------------------------------------------------

    @rule(shape=st.sampled_from(SHAPES))
    def create_ledger(self, shape: tuple[int, int, int]) -> None:
        async def create() -> LedgerHandle | None:
            try:
                return await self.env.writer.create_ledger(*shape)
            except NotEnoughBookiesError:
                assert len(self.running()) < shape[0]
                return None

        handle = self.driver.run(create)
        if handle is not None:
            self.ledgers.append(LedgerModel(handle))

    @precondition(lambda self: bool(self.open_ledgers()))
    @rule(data=st.data(), n=st.integers(1, 25))
    def write(self, data: st.DataObject, n: int) -> None:
        model = data.draw(st.sampled_from(self.open_ledgers()))
        lh = model.handle

        async def write() -> None:
            with trio.fail_after(60):
                futures = []
                try:
                    for _ in range(n):
                        entry_id = lh.last_add_pushed + 1
                        futures.append(lh.append_async(payload(lh.ledger_id, entry_id)))
                except BKError as exc:
                    model.errors.append(exc)
                for f in futures:
                    try:
                        model.acked.append(await f.result())
                    except BKError as exc:
                        model.errors.append(exc)

        self.driver.run(write)
        assert model.acked == list(range(len(model.acked)))
        assert lh.last_add_confirmed == len(model.acked) - 1

    @precondition(lambda self: bool(self.open_ledgers()))
    @rule(data=st.data())
    def close(self, data: st.DataObject) -> None:
        model = data.draw(st.sampled_from(self.open_ledgers()))

        async def close() -> None:
            try:
                await model.handle.close()
            except BKError as exc:
                model.errors.append(exc)

        self.driver.run(close)
        if model.handle.metadata.is_closed:
            model.closed_at = model.handle.metadata.last_entry_id

    @precondition(lambda self: len(self.env.cluster.running_ids()) > 2)
    @rule(data=st.data(), keep_registration=st.booleans())
    def crash_bookie(self, data: st.DataObject, keep_registration: bool) -> None:
        bookie = data.draw(st.sampled_from(self.running()))
        self.driver.run(
            lambda: self.env.cluster.stop_bookie(bookie, unregister=not keep_registration)
        )

    @precondition(lambda self: len(self.env.cluster.running_ids()) < BOOKIES)
    @rule(data=st.data())
    def restart_bookie(self, data: st.DataObject) -> None:
        bookie = data.draw(st.sampled_from(self.stopped()))

        async def restart() -> None:
            await self.env.cluster.unregister(bookie)  # a stale one, if it was kept
            await self.env.cluster.start_bookie(bookie)

        self.driver.run(restart)

    @precondition(lambda self: any(m.closed_at is None for m in self.ledgers))
    @rule(data=st.data())
    def recover(self, data: st.DataObject) -> None:
        model = data.draw(st.sampled_from([m for m in self.ledgers if m.closed_at is None]))
        self.driver.run(self._recover, model)

    async def _recover(self, model: LedgerModel) -> None:
        try:
            with trio.fail_after(60):
                handle = await self.env.recoverer.open_ledger(model.handle.ledger_id, recovery=True)
        except BKError:
            return  # e.g. too few bookies up to fence: stays IN_RECOVERY, retried later
        model.closed_at = handle.metadata.last_entry_id
        model.recovered = True

    def zombies(self) -> list[LedgerModel]:
        return [m for m in self.ledgers if m.recovered and not m.handle.is_closed]

    @precondition(lambda self: bool(self.zombies()))
    @rule(data=st.data(), n=st.integers(1, 5))
    def zombie_write(self, data: st.DataObject, n: int) -> None:
        """The writer of a recovered ledger goes on adding: every add must fail."""
        model = data.draw(st.sampled_from(self.zombies()))
        lh = model.handle
        before = list(model.acked)

        async def write() -> None:
            with trio.fail_after(60):
                for _ in range(n):
                    try:
                        await lh.add_entry(payload(lh.ledger_id, lh.last_add_pushed + 1))
                    except (LedgerFencedError, LedgerClosedError):
                        continue
                    raise AssertionError(f"zombie add acknowledged on ledger {lh.ledger_id}")

        self.driver.run(write)
        assert model.acked == before

    @precondition(lambda self: any(m.closed_at is not None for m in self.ledgers))
    @rule(data=st.data())
    def read_closed(self, data: st.DataObject) -> None:
        model = data.draw(st.sampled_from([m for m in self.ledgers if m.closed_at is not None]))
        self.driver.run(self._check_readable, model, False)

    async def _check_readable(self, model: LedgerModel, strict: bool) -> None:
        ledger_id = model.handle.ledger_id
        reader = await self.env.recoverer.open_ledger(ledger_id)
        last = reader.metadata.last_entry_id
        assert last == model.closed_at
        if last < 0:
            return
        try:
            entries = await reader.read_entries(0, last)
        except BKError:
            if strict:
                raise
            return  # every replica of some entry is down right now
        assert [e.payload for e in entries] == [payload(ledger_id, i) for i in range(last + 1)]
        if strict:
            await self._check_replicas(ledger_id, reader.metadata)

    async def _check_replicas(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        for entry_id in range(metadata.last_entry_id + 1):
            stored = await holders(self.env.recoverer, ledger_id, metadata, entry_id)
            assert len(stored) >= metadata.ack_quorum_size, (ledger_id, entry_id, stored)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def acknowledged_never_exceeds_the_close(self) -> None:  # S1
        for model in self.ledgers:
            if model.closed_at is not None:
                assert max(model.acked, default=-1) <= model.closed_at, model

    @invariant()
    def no_invalid_ensemble_proposed(self) -> None:  # S5
        for model in self.ledgers:
            assert not any(isinstance(e, MetadataConflictError) for e in model.errors), model

    @invariant()
    def handles_keep_their_invariants(self) -> None:  # handle_state's table and _check()
        async def check() -> None:  # in the trio thread, so no task runs meanwhile
            for model in self.ledgers:
                model.handle._check()
                model.handle.metadata._check()  # LedgerMetadata's invariants, as it is now

        self.driver.run(check)

    # -- the end ---------------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            self.driver.run(self._final_check)
        finally:
            self.driver.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)

    async def _final_check(self) -> None:
        cluster = self.env.cluster
        for bookie in self.bookie_ids:
            if bookie not in cluster.running_ids():
                await cluster.unregister(bookie)
                await cluster.start_bookie(bookie)
        for model in self.ledgers:
            if model.closed_at is None:
                await self._recover(model)
                assert model.closed_at is not None, "with every bookie up, recovery succeeds"
        self.acknowledged_never_exceeds_the_close()
        for model in self.ledgers:
            await self._check_readable(model, strict=True)


_profile = settings.default
ClusterMachine.TestCase.settings = settings(
    max_examples=max(8, (_profile.max_examples if _profile else 60) // 6),
    stateful_step_count=12,
    deadline=None,
)
test_cluster_histories = ClusterMachine.TestCase
