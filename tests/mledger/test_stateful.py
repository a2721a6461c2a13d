"""The managed ledger on real bookies, driven by hypothesis: adds, time, rollover, PIP-404
properties, clean reopens and takeovers by another owner, in any order.

Why: the life-cycle table (``mledger/state.py``) and the rollover rules are tested pure in
``test_state_and_rules.py``; this checks that the managed ledger keeps them together with its
I/O — ``ManagedLedger._check()`` after every step, every acknowledged entry readable in order,
and a fenced owner refusing writes.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from bookiesim.client import BookKeeper
from bookiesim.cluster.in_process import LocalCluster, TrioThread, running_cluster
from bookiesim.mledger.config import ManagedLedgerConfig
from bookiesim.mledger.errors import ManagedLedgerFencedError
from bookiesim.mledger.managed_ledger import ManagedLedger
from bookiesim.mledger.position import Position

from .conftest import TEST_CONFIG, FakeClock

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

CONFIG = ManagedLedgerConfig(
    max_entries_per_ledger=3, minimum_rollover_time_ms=0, maximum_rollover_time_ms=10_000
)
NAME = "tenant/ns/persistent/stateful"


@dataclass
class Env:
    cluster: LocalCluster
    bk: BookKeeper


@asynccontextmanager
async def environment(root: Path) -> AsyncIterator[Env]:
    async with (
        running_cluster(root, 2) as cluster,
        BookKeeper(cluster.store, config=TEST_CONFIG) as bk,
    ):
        yield Env(cluster, bk)


class ManagedLedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="ml-stateful-"))
        self.driver = TrioThread()
        self.env = self.driver.start(lambda: environment(self.tmp))
        self.clock = FakeClock()
        self.ml = self._open()
        self.stored: list[bytes] = []

    def _open(self) -> ManagedLedger:
        async def open_() -> ManagedLedger:
            return await ManagedLedger.open(
                self.env.bk, NAME, CONFIG, clock=self.clock, rollover_check_interval=None
            )

        return self.driver.run(open_)

    @rule(n=st.integers(1, 5))
    def add(self, n: int) -> None:
        payloads = [b"e%d" % (len(self.stored) + i) for i in range(n)]
        self.driver.run(self.ml.add_entries, payloads)
        self.stored.extend(payloads)

    @rule(ms=st.sampled_from([0, 5_000, 11_000]))
    def time_passes(self, ms: int) -> None:
        self.clock.advance(ms)
        self.driver.run(self.ml.check_rollover)

    @rule(data=st.data(), value=st.text(min_size=1, max_size=4))
    def set_ledger_property(self, data: st.DataObject, value: str) -> None:
        ledger_id = data.draw(st.sampled_from(self.ml.ledger_list().ledgers)).ledger_id
        self.driver.run(self.ml.add_ledger_property, ledger_id, "k", value)
        assert self.ml.get_ledger_property(ledger_id, "k") == value

    @rule()
    def reopen(self) -> None:
        self.driver.run(self.ml.close)
        self.ml._check()
        assert self.ml.is_closed
        assert not self.ml.is_fenced
        self.ml = self._open()

    @rule()
    def taken_over(self) -> None:
        old, self.ml = self.ml, self._open()  # recovery fences the old owner's ledger
        with pytest.raises(ManagedLedgerFencedError):
            self.driver.run(old.add_entries, [b"late"])
        old._check()
        assert old.is_fenced
        self.driver.run(old.close)  # the owner still closes it: both facts stay
        old._check()
        assert old.is_fenced
        assert old.is_closed

    @invariant()
    def checks_and_reads_back(self) -> None:
        self.ml._check()
        assert not self.ml.is_closed
        assert not self.ml.is_fenced
        first = Position(self.ml.ledger_list().ledgers[0].ledger_id, 0)
        read = self.driver.run(self.ml.read_entries, first, len(self.stored) + 1)
        assert [payload for _, payload in read] == self.stored

    def teardown(self) -> None:
        try:
            self.driver.run(self.ml.close)
        finally:
            self.driver.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)


TestManagedLedgerStateful = ManagedLedgerMachine.TestCase
TestManagedLedgerStateful.settings = settings(
    max_examples=20, stateful_step_count=15, deadline=None
)
