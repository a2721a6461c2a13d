"""The lazy file system's model against the plainest reference: each file as two byte strings,
what is durable and what a reader sees.

Any sequence of writes, truncates, fsyncs and crashes (torn or not) must leave the backing
"disk" holding exactly the synced content, plus the torn prefix of the last unsynced write,
and reads must always see the latest content. Read faults come and go among them (and files
move between directories): a read is refused exactly while a text failed and not healed is
in the file's path, and nothing else changes: what a file holds once its reads work again is
what the other rules made of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from bookiesim.chaos.lazyfs.model import LazyState, ReadFaults, SyncPlan, tear_length

if TYPE_CHECKING:
    from collections.abc import Callable

FILES = ("journal", "entrylog", "index")
DIRS = ("journal", "ledgers", "ledgers/current")
TEXTS = ("/journal/", "ledgers", ".log", "entrylog", "x")
"""Texts a read fault is given: some hit a directory, some a name, one nothing."""


def _put(buf: bytes, offset: int, data: bytes) -> bytes:
    if not data:
        return buf  # a write of nothing does not extend a file (POSIX)
    grown = buf.ljust(offset, b"\0")
    return grown[:offset] + data + grown[offset + len(data) :]


def _truncate(buf: bytes, size: int) -> bytes:
    return buf[:size].ljust(size, b"\0")


def _apply(disk: bytes, plan: SyncPlan) -> bytes:
    if plan.cut is not None:
        disk = _truncate(disk, plan.cut)
    disk = _truncate(disk, plan.size)
    for offset, data in plan.writes:
        disk = _put(disk, offset, data)
    return disk


def _reader(disk: bytes) -> Callable[[int, int], bytes]:
    return lambda offset, length: disk[offset : offset + length]


@dataclass
class Reference:
    durable: dict[str, bytes] = field(default_factory=lambda: dict.fromkeys(FILES, b""))
    current: dict[str, bytes] = field(default_factory=lambda: dict.fromkeys(FILES, b""))
    unsynced: list[tuple[str, int, bytes]] = field(default_factory=list)
    """The writes not yet synced, oldest first, across all files."""


class LazyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model: LazyState[str] = LazyState()
        self.disk: dict[str, bytes] = dict.fromkeys(FILES, b"")
        self.ref = Reference()
        self.faults = ReadFaults()
        self.paths = {
            name: f"/disk/{DIRS[i % len(DIRS)]}/{name}.log" for i, name in enumerate(FILES)
        }
        self.failing: set[str] = set()
        self.refused = 0

    def _durable_size(self, name: str) -> int:
        return len(self.disk[name])

    @rule(
        name=st.sampled_from(FILES),
        offset=st.integers(0, 64),
        data=st.binary(min_size=0, max_size=24),
    )
    def write(self, name: str, offset: int, data: bytes) -> None:
        self.model.write(name, offset, data, lambda: self._durable_size(name))
        self.ref.current[name] = _put(self.ref.current[name], offset, data)
        if data:
            self.ref.unsynced.append((name, offset, data))

    @rule(name=st.sampled_from(FILES), size=st.integers(0, 80))
    def truncate(self, name: str, size: int) -> None:
        self.model.truncate(name, size, lambda: self._durable_size(name))
        self.ref.current[name] = _truncate(self.ref.current[name], size)

    @rule(name=st.sampled_from(FILES))
    def fsync(self, name: str) -> None:
        plan = self.model.sync(name)
        if plan is not None:
            self.disk[name] = _apply(self.disk[name], plan)
        self.ref.durable[name] = self.ref.current[name]
        self.ref.unsynced = [w for w in self.ref.unsynced if w[0] != name]

    @rule(
        tear=st.none() | st.integers(0, 30) | st.floats(0.0, 1.0),
        only=st.none() | st.sampled_from(FILES),
    )
    def crash(self, tear: int | float | None, only: str | None) -> None:
        report = self.model.crash(tear, None if only is None else lambda name: name == only)
        if report.torn is not None:
            self.disk[report.torn.key] = _put(
                self.disk[report.torn.key], report.torn.offset, report.torn.data
            )
        chosen = [w for w in self.ref.unsynced if only is None or w[0] == only]
        last = chosen[-1] if chosen else None
        if tear is not None and last is not None:
            name, offset, data = last
            kept = data[: tear_length(tear, len(data))]
            self.ref.durable[name] = _put(self.ref.durable[name], offset, kept)
            assert report.torn is not None
            assert (report.torn.key, report.torn.offset, report.torn.length) == (
                name,
                offset,
                len(data),
            )
        else:
            assert report.torn is None
        self.ref.current = dict(self.ref.durable)
        self.ref.unsynced = []
        assert self.model.files() == []

    @rule(name=st.sampled_from(FILES), directory=st.sampled_from(DIRS))
    def rename(self, name: str, directory: str) -> None:
        self.paths[name] = f"/disk/{directory}/{name}.log"

    @rule(text=st.sampled_from(TEXTS))
    def fail_reads(self, text: str) -> None:
        self.faults.fail(text)
        self.failing.add(text)

    @rule(text=st.none() | st.sampled_from(TEXTS))
    def heal_reads(self, text: str | None) -> None:
        assert self.faults.heal(text) == self.refused
        self.failing = set() if text is None else self.failing - {text}
        if not self.failing:
            self.refused = 0

    @rule(name=st.sampled_from(FILES))
    def read(self, name: str) -> None:
        path = self.paths[name]
        expected = any(text in path for text in self.failing)
        assert self.faults.refuses([path]) == expected
        self.refused += expected
        assert self.faults.texts == self.failing

    @invariant()
    def disk_holds_exactly_the_synced_content_when_nothing_is_pending(self) -> None:
        for name in FILES:
            if self.model.pending(name) is None:
                assert self.disk[name] == self.ref.durable[name] == self.ref.current[name]

    @invariant()
    def reads_see_the_latest_content(self) -> None:
        for name in FILES:
            disk = self.disk[name]
            size = self.model.size(name, len(disk))
            assert size == len(self.ref.current[name])
            got = self.model.read(name, 0, size + 8, _reader(disk))
            assert (disk if got is None else got) == self.ref.current[name]

    @invariant()
    def a_partial_read_is_a_slice_of_the_whole(self) -> None:
        name = FILES[0]
        disk = self.disk[name]
        got = self.model.read(name, 5, 7, lambda o, n: disk[o : o + n])
        if got is not None:
            assert got == self.ref.current[name][5:12]


TestLazyModel = LazyMachine.TestCase


@given(st.binary(min_size=1, max_size=100), st.integers(0, 200))
def test_a_tear_in_bytes_keeps_at_most_the_whole_write(data: bytes, tear: int) -> None:
    model: LazyState[str] = LazyState()
    model.write("f", 10, data, lambda: 0)
    report = model.crash(tear)
    assert report.torn is not None
    assert report.torn.data == data[:tear]
    assert report.torn.length == len(data)


def test_the_last_write_torn_is_the_latest_across_files_not_the_latest_file() -> None:
    model: LazyState[str] = LazyState()
    model.write("a", 0, b"first", lambda: 0)
    model.write("b", 0, b"second", lambda: 0)
    model.write("a", 5, b"third!", lambda: 0)
    report = model.crash(0.5)
    assert report.torn is not None
    assert (report.torn.key, report.torn.offset, report.torn.data) == ("a", 5, b"thi")
    assert report.files == 2


def test_a_tear_among_some_files_tears_their_last_write() -> None:
    model: LazyState[str] = LazyState()
    model.write("journal", 0, b"record", lambda: 0)
    model.write("entrylog", 0, b"later", lambda: 0)
    report = model.crash(3, among=lambda name: name == "journal")
    assert report.torn is not None
    assert (report.torn.key, report.torn.data) == ("journal", b"rec")
    model.write("entrylog", 0, b"only", lambda: 0)
    assert model.crash(3, among=lambda name: name == "journal").torn is None


def test_a_synced_file_has_no_write_left_to_tear() -> None:
    model: LazyState[str] = LazyState()
    model.write("a", 0, b"synced", lambda: 0)
    assert model.sync("a") is not None
    assert model.crash(3).torn is None


@pytest.mark.parametrize(("tear", "why"), [(-1, "negative"), (1.5, "within"), (True, "bool")])
def test_a_tear_that_makes_no_sense_is_refused(tear: int | float, why: str) -> None:
    with pytest.raises((ValueError, TypeError), match=why):
        tear_length(tear, 10)


def test_a_read_fault_needs_a_text_and_a_file_of_several_links_fails_by_any() -> None:
    faults = ReadFaults()
    with pytest.raises(ValueError, match="must not be empty"):
        faults.fail("")
    faults.fail("/ledgers/")
    assert faults.refuses(["/disk/elsewhere/0.log", "/disk/ledgers/current/0.log"])
    assert not faults.refuses(["/disk/journal/current/0.txn"])
    assert faults.heal("/journal/") == 1  # healing a text never failed leaves the others
    assert faults.refuses(["/disk/ledgers/current/0.log"])
    assert faults.heal() == 2
    assert not faults.refuses(["/disk/ledgers/current/0.log"])
