"""Where a ledger ends, as the client decides it from its bookies' answers, against upstream's
rule for the same answers.

Why: a bookie that cannot be reached must leave the decision open (it may hold what the
others lack) without blocking it when the others can settle it, and an explicit "no such
entry/ledger" is the only answer that rules an entry out. Upstream's client states the rule
twice: ``RoundRobinDistributionSchedule``'s ``QuorumCoverageSet.checkCovered`` (used by
``ReadLastConfirmedOp``: the LAC is known once no write set has Qa bookies that answered
neither OK nor NoSuchEntry/NoSuchLedger; every bookie answered without that: the read fails),
and ``PendingReadOp``'s recovery read (the write set asked in order; the first good copy
settles the entry as found, ``Qw - Qa + 1`` NoSuchEntry/NoSuchLedger answers as never
acknowledged, and anything else fails the read). Both are restated below in upstream's own
terms, independently of :mod:`bookiesim.client.distribution`, and the client's handle is
driven through a fake connection pool that answers as hypothesis draws.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from bookiesim.client import BKError, BookieUnavailableError, ClientConfig
from bookiesim.client.digest import DigestManager, DigestType
from bookiesim.client.read_handle import ReadOnlyLedgerHandle
from bookiesim.metadata.ledgers import LedgerMetadata
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.client.bookie_pool import Outcome
    from bookiesim.proto.v3 import WireRequest

LEDGER = 9
LAC_IN_ENTRIES = 4
"""The LAC the entries the fake bookies return carry."""


class Answer(enum.Enum):
    OK = "ok"
    NO_SUCH_ENTRY = "no such entry"
    NO_SUCH_LEDGER = "no such ledger"
    UNREACHABLE = "unreachable"
    ERROR = "error"  # any other status (EIO): upstream's "some other rc"


ANSWERS = st.sampled_from(list(Answer))
NO_SUCH = (Answer.NO_SUCH_ENTRY, Answer.NO_SUCH_LEDGER)


class FakePool:
    """Answers every request to bookie ``b<i>`` as ``answers[i]`` says."""

    v2 = False

    def __init__(self, answers: list[Answer], digest: DigestManager) -> None:
        self.answers = answers
        self.digest = digest
        self.asked: list[int] = []

    def _outcome(self, bookie: str, request: WireRequest) -> Outcome:
        position = int(bookie[1:])
        self.asked.append(position)
        answer = self.answers[position]
        if answer is Answer.UNREACHABLE:
            return BookieUnavailableError("cannot connect", bookie=bookie)
        if answer is Answer.ERROR:
            return pb.Response(status=pb.EIO)
        if answer in NO_SUCH:
            return pb.Response(
                status=pb.ENOENTRY if answer is Answer.NO_SUCH_ENTRY else pb.ENOLEDGER
            )
        message = pb.Request.FromString(request.fields)
        if message.HasField("readLacRequest"):
            # Its own id as its LAC, so the handle knows the length without another read.
            body = self.digest.package(LAC_IN_ENTRIES, LAC_IN_ENTRIES, 10, b"x")
            lac = pb.ReadLacResponse(status=pb.EOK, ledgerId=LEDGER, lastEntryBody=body)
            return pb.Response(status=pb.EOK, readLacResponse=lac)
        entry_id = message.readRequest.entryId
        body = self.digest.package(entry_id, LAC_IN_ENTRIES, 10 + entry_id, b"x")
        read = pb.ReadResponse(status=pb.EOK, ledgerId=LEDGER, entryId=entry_id, body=body)
        return pb.Response(status=pb.EOK, readResponse=read)

    def submit(
        self, bookie: str, request: WireRequest, callback: Callable[[Outcome], None]
    ) -> None:
        callback(self._outcome(bookie, request))

    async def call(self, bookie: str, request: WireRequest) -> pb.Response:
        outcome = self._outcome(bookie, request)
        if isinstance(outcome, BKError):
            raise outcome
        return outcome


class FakeLedgerManager:
    def __init__(self, metadata: LedgerMetadata) -> None:
        self.metadata = metadata

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        return self.metadata, 0


class FakeContext:
    """Just what a read handle uses of its client."""

    def __init__(self, pool: FakePool, metadata: LedgerMetadata) -> None:
        self.pool = pool
        self.config = ClientConfig()
        self.ledger_manager = FakeLedgerManager(metadata)


@st.composite
def shapes_and_answers(draw: st.DrawFn) -> tuple[int, int, int, list[Answer]]:
    e = draw(st.integers(1, 6))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    return e, qw, qa, draw(st.lists(ANSWERS, min_size=e, max_size=e))


def handle_on(
    e: int, qw: int, qa: int, answers: list[Answer]
) -> tuple[ReadOnlyLedgerHandle, FakePool]:
    metadata = LedgerMetadata(
        ensemble_size=e,
        write_quorum_size=qw,
        ack_quorum_size=qa,
        ensembles={0: tuple(f"b{i}" for i in range(e))},
    )
    pool = FakePool(answers, DigestManager(LEDGER, b"", DigestType.CRC32C))
    handle = ReadOnlyLedgerHandle(FakeContext(pool, metadata), LEDGER, metadata, 0)  # type: ignore[arg-type]
    return handle, pool


# -- upstream's rules, in its terms ---------------------------------------------------------


def upstream_lac_covered(e: int, qw: int, qa: int, answers: list[Answer]) -> bool:
    """``RRQuorumCoverageSet.checkCovered`` once every bookie answered: for each of the E
    write sets, the bookies that answered neither OK nor NoSuch{Entry,Ledger} are unknown,
    and Qa unknown in one write set leave the LAC undecided (the read fails)."""
    known = (Answer.OK, *NO_SUCH)
    for i in range(e):
        unknown = sum(1 for j in range(qw) if answers[(i + j) % e] not in known)
        if unknown >= qa:
            return False
    return True


def upstream_recovery_read(
    entry_id: int, e: int, qw: int, qa: int, answers: list[Answer]
) -> str | None:
    """``PendingReadOp``'s sequential recovery read of one entry: "found", "no such entry",
    or None (the read fails with the first error)."""
    missing = 0
    for j in range(qw):
        answer = answers[(entry_id + j) % e]
        if answer is Answer.OK:
            return "found"
        if answer in NO_SUCH:
            missing += 1
            if missing >= qw - qa + 1:
                return "no such entry"
    return None


# -- the client against them ------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(shapes_and_answers())
def test_the_lac_is_known_exactly_when_upstream_would_know_it(
    case: tuple[int, int, int, list[Answer]],
) -> None:
    e, qw, qa, answers = case
    handle, _ = handle_on(e, qw, qa, answers)

    async def lac() -> int | None:
        try:
            return await handle.read_last_add_confirmed()
        except BookieUnavailableError as exc:
            return None if "cannot learn the last add confirmed" in str(exc) else -2

    got = trio.run(lac)
    if upstream_lac_covered(e, qw, qa, answers):
        assert got == (LAC_IN_ENTRIES if Answer.OK in answers else -1)
    else:
        assert got is None


@settings(max_examples=300, deadline=None)
@given(shapes_and_answers(), st.integers(0, 20))
def test_an_entry_past_the_lac_is_decided_as_upstreams_recovery_read_decides(
    case: tuple[int, int, int, list[Answer]], entry_id: int
) -> None:
    e, qw, qa, answers = case
    handle, pool = handle_on(e, qw, qa, answers)

    async def read() -> str | None:
        try:
            entry = await handle.read_past_lac(entry_id)
        except BKError as exc:
            return None if f"entry {entry_id}: cannot tell" in str(exc) else str(exc)
        if entry is None:
            return "no such entry"
        assert (entry.entry_id, entry.length) == (entry_id, 10 + entry_id)
        return "found"

    assert trio.run(read) == upstream_recovery_read(entry_id, e, qw, qa, answers)
    # Only the entry's write set is asked, in order, and nobody after the decision.
    write_set = [(entry_id + j) % e for j in range(qw)]
    assert pool.asked == write_set[: len(pool.asked)]


@pytest.mark.parametrize(
    ("shape", "answers", "covered"),
    [
        # One dead bookie of four answers decides nothing, and blocks nothing.
        ((2, 2, 2), [Answer.UNREACHABLE, Answer.NO_SUCH_LEDGER], True),
        ((3, 2, 2), [Answer.UNREACHABLE, Answer.NO_SUCH_LEDGER, Answer.OK], True),
        ((3, 3, 2), [Answer.OK, Answer.UNREACHABLE, Answer.NO_SUCH_ENTRY], True),
        # The whole ensemble down, or Qa of one write set: not known.
        ((2, 2, 2), [Answer.UNREACHABLE, Answer.UNREACHABLE], False),
        ((3, 2, 2), [Answer.UNREACHABLE, Answer.UNREACHABLE, Answer.OK], False),
        ((3, 3, 1), [Answer.OK, Answer.OK, Answer.ERROR], False),
    ],
)
def test_the_issue_32_cases(
    shape: tuple[int, int, int], answers: list[Answer], covered: bool
) -> None:
    handle, _ = handle_on(*shape, answers)

    async def lac() -> None:
        await handle.read_last_add_confirmed()

    if covered:
        trio.run(lac)
    else:
        with pytest.raises(BookieUnavailableError, match="cannot learn the last add confirmed"):
            trio.run(lac)
