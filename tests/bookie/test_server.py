"""The bookie as a client sees it: every v3 operation and status code of reference §1.7,
and the v2 protocol on the same port (§1.6), through a real socket."""

from __future__ import annotations

import errno
import os
import re
import struct
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest
import trio

from bookiesim.bookie.config import LEDGER_STORAGE_NAMES
from bookiesim.client.bookie_connection import BookieConnection, ConnectionClosedError, connect
from bookiesim.client.digest import DigestManager, master_key
from bookiesim.cluster.testing import (
    BookieTestClient,
    bookie_client,
    bookie_config,
    running_bookie,
    write_out_table,
)
from bookiesim.entrylog.rotation import RotationReason
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from bookiesim.proto.availability import decode_availability
from bookiesim.proto.frames import NEED_DATA, FrameDecoder, encode_frame

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from bookiesim.bookie.config import BookieConfig
    from bookiesim.bookie.ledger_storage import LedgerStorage
    from bookiesim.bookie.process import BookieService

KEY_OTHER = b"\x01" * 20


def status(response: pb.Response) -> str:
    return pb.StatusCode.Name(response.status)


async def test_add_then_read_returns_stored_bytes_and_lac(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        for entry_id in range(3):
            r = await c.add(7, entry_id, b"payload-%d" % entry_id, lac=entry_id - 1)
            assert status(r) == "EOK"
            assert (r.addResponse.ledgerId, r.addResponse.entryId) == (7, entry_id)
            assert r.header.operation == pb.ADD_ENTRY
        r = await c.read(7, 1)
        assert status(r) == "EOK"
        verified = DigestManager(7, b"").verify(r.readResponse.body, expected_entry_id=1)
        assert verified.payload == b"payload-1"
        assert r.readResponse.maxLAC == 1
        last = await c.read(7, -1)
        assert DigestManager(7, b"").verify(last.readResponse.body).entry_id == 2


async def test_read_statuses(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        assert status(await c.read(99, 0)) == "ENOLEDGER"
        await c.add(1, 0, b"x")
        assert status(await c.read(1, 5)) == "ENOENTRY"
        r = await c.read(1, 5)
        assert r.readResponse.ledgerId == 1
        assert r.readResponse.entryId == 5


async def test_ids_come_from_the_body_not_the_request(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        body = DigestManager(3, b"").package(0, -1, 1, b"z")
        add = pb.AddRequest(ledgerId=999, entryId=42, masterKey=c.key, body=body)
        r = await c.conn.call(c.request(pb.ADD_ENTRY, addRequest=add))
        assert status(r) == "EOK"
        assert status(await c.read(3, 0)) == "EOK"
        assert status(await c.read(999, 42)) == "ENOLEDGER"


async def test_master_key_mismatch_is_eua(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        await c.add(1, 0, b"x")
        assert status(await c.add(1, 1, b"y", key=KEY_OTHER)) == "EUA"
        assert status(await c.read(1, 1)) == "ENOENTRY", "a rejected add must store nothing"


async def test_plain_adds_and_adds_with_a_request_context_get_the_same_answers(
    tmp_path: Path,
) -> None:
    """A plain add is read without a protobuf object (proto/v3_add.py); one carrying a field
    that path does not read (a request context) takes the general path. Accepted or
    refused, fenced or not, both get the same answer."""

    async def both(c: BookieTestClient, entry_id: int, key: bytes) -> list[pb.Response]:
        answers = []
        for context in (False, True):
            body = c.digest(4).package(entry_id, -1, entry_id + 1, b"e")
            add = pb.AddRequest(ledgerId=4, entryId=entry_id, masterKey=key, body=body)
            request = c.request(pb.ADD_ENTRY, addRequest=add)
            if context:
                request.requestContext.add(key="k", value="v")
            answer = await c.conn.call(request)
            answer.header.txnId = 0
            answers.append(answer)
        return answers

    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        plain, general = await both(c, 0, c.key)
        assert status(plain) == "EOK"
        assert plain == general
        plain, general = await both(c, 1, KEY_OTHER)
        assert status(plain) == "EUA"
        assert plain == general
        assert plain.addResponse.entryId == 1, "a refusal names the request's ids"
        assert status(await c.read(4, -1, fence=True)) == "EOK"
        plain, general = await both(c, 2, c.key)
        assert status(plain) == "EFENCED"
        assert plain == general


@pytest.mark.parametrize("storage", LEDGER_STORAGE_NAMES)
async def test_fencing(tmp_path: Path, storage: str) -> None:
    cfg = bookie_config(tmp_path, ledger_storage_class=storage)
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        await c.add(1, 0, b"a")
        await c.add(1, 1, b"b", lac=0)
        # A fencing read without a key is unauthorised; with a wrong key too.
        no_key = pb.ReadRequest(ledgerId=1, entryId=-1, flag=pb.ReadRequest.FENCE_LEDGER)
        r = await c.conn.call(c.request(pb.READ_ENTRY, readRequest=no_key))
        assert status(r) == "EUA"
        assert status(await c.read(1, -1, fence=True, key=KEY_OTHER)) == "EUA"
        r = await c.read(1, -1, fence=True)
        assert status(r) == "EOK"
        assert DigestManager(1, b"").verify(r.readResponse.body).entry_id == 1
        assert status(await c.add(1, 2, b"c", lac=1)) == "EFENCED"
        assert status(await c.add(1, 2, b"c", lac=1, recovery=True)) == "EOK"
        assert status(await c.add(1, 3, b"d", lac=1, recovery=True, key=KEY_OTHER)) == "EUA"
        # Fencing rotates the ledger's log (BP-32); with the sorted storage, once the
        # ledger's entries have left the table.
        await write_out_table(svc)
        assert svc.bookie.storage.entry_logger.rotations[RotationReason.FENCE] == 1
        # Once the fence is durable, fencing reads take the quick path (no task of their
        # own): same answers, same key checks.
        assert svc.bookie.fence_is_durable(1)
        assert status(await c.read(1, 0, fence=True)) == "EOK"
        assert status(await c.read(1, 9, fence=True)) == "ENOENTRY"
        assert status(await c.read(1, 0, fence=True, key=KEY_OTHER)) == "EUA"
        r = await c.conn.call(c.request(pb.READ_ENTRY, readRequest=no_key))
        assert status(r) == "EUA"


async def test_fencing_read_of_an_unknown_ledger_creates_it_and_answers_enoentry(
    tmp_path: Path,
) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        assert status(await c.read(5, -1, fence=True)) == "ENOENTRY"
        assert status(await c.add(5, 0, b"late")) == "EFENCED"


async def test_fence_survives_restart(tmp_path: Path) -> None:
    cfg = bookie_config(tmp_path)
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        await c.add(1, 0, b"a")
        assert status(await c.read(1, 0, fence=True)) == "EOK"
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        assert status(await c.add(1, 1, b"b", lac=0)) == "EFENCED"
        r = await c.read(1, 0)
        assert DigestManager(1, b"").verify(r.readResponse.body).payload == b"a"


async def test_a_fence_that_failed_to_persist_is_never_answered_as_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the stateful simulation (tests/sim/test_stateful.py): a disk filled
    up during a recovery, the fence's journal write failed, and a later fencing read of the
    same ledger was answered as if the fence were durable; after a restart the ledger was
    not fenced (A2)."""
    failing = True
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        if failing and "journal" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "no space left (test)")
        return real_pwrite(fd, data, offset)

    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        await c.add(1, 0, b"a")
        monkeypatch.setattr(os, "pwrite", pwrite)
        for _ in range(3):
            assert status(await c.read(1, 0, fence=True)) == "EIO"
            assert not svc.bookie.fence_is_durable(1)
        failing = False  # let the bookie shut down


async def test_long_poll_wakes_on_add_and_times_out(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        await c.add(1, 0, b"a", lac=-1)
        await c.add(1, 1, b"b", lac=0)  # LAC 0 on the bookie
        started = trio.current_time()
        r = await c.read(1, 0, previous_lac=0, timeout_ms=100)
        assert trio.current_time() - started >= 0.09
        assert status(r) == "EOK"
        assert r.readResponse.maxLAC == 0

        result: list[pb.Response] = []

        async def poll() -> None:
            result.append(await c.read(1, -1, previous_lac=0, timeout_ms=5000, piggyback=True))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await trio.sleep(0.05)
            await c.add(1, 2, b"c", lac=1)
        (r,) = result
        assert status(r) == "EOK"
        assert r.readResponse.maxLAC == 1
        # The piggybacked entry is previousLAC + 1.
        assert DigestManager(1, b"").verify(r.readResponse.body).entry_id == 1


async def test_piggyback_without_previous_lac_is_ebadreq(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        await c.add(1, 0, b"a")
        assert status(await c.read(1, -1, piggyback=True)) == "EBADREQ"


async def test_write_lac_and_read_lac(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        await c.add(1, 0, b"a")
        r = await c.conn.call(c.request(pb.READ_LAC, readLacRequest=pb.ReadLacRequest(ledgerId=1)))
        assert status(r) == "EOK"
        assert not r.readLacResponse.HasField("lacBody")
        assert DigestManager(1, b"").verify(r.readLacResponse.lastEntryBody).entry_id == 0
        blob = DigestManager(1, b"").package_lac(0)
        wl = pb.WriteLacRequest(ledgerId=1, lac=0, masterKey=c.key, body=blob)
        r = await c.conn.call(c.request(pb.WRITE_LAC, writeLacRequest=wl))
        assert status(r) == "EOK"
        assert r.writeLacResponse.ledgerId == 1
        r = await c.conn.call(c.request(pb.READ_LAC, readLacRequest=pb.ReadLacRequest(ledgerId=1)))
        assert DigestManager(1, b"").verify_lac(r.readLacResponse.lacBody) == 0
        r = await c.conn.call(c.request(pb.READ_LAC, readLacRequest=pb.ReadLacRequest(ledgerId=8)))
        assert status(r) == "ENOLEDGER"


async def test_read_lac_of_empty_ledger_is_enoentry(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        await c.read(4, -1, fence=True)  # creates the ledger, no entries
        r = await c.conn.call(c.request(pb.READ_LAC, readLacRequest=pb.ReadLacRequest(ledgerId=4)))
        assert status(r) == "ENOENTRY"


async def test_deferred_sync_and_force_ledger(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        r = await c.add(1, 0, b"a", write_flags=1)
        assert status(r) == "EOK"
        force = pb.ForceLedgerRequest(ledgerId=1)
        r = await c.conn.call(c.request(pb.FORCE_LEDGER, forceLedgerRequest=force))
        assert status(r) == "EOK"
        assert r.forceLedgerResponse.ledgerId == 1


async def test_get_bookie_info(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        flags = (
            pb.GetBookieInfoRequest.TOTAL_DISK_CAPACITY | pb.GetBookieInfoRequest.FREE_DISK_SPACE
        )
        req = c.request(
            pb.GET_BOOKIE_INFO, getBookieInfoRequest=pb.GetBookieInfoRequest(requested=flags)
        )
        r = await c.conn.call(req)
        info = r.getBookieInfoResponse
        assert status(r) == "EOK"
        assert info.totalDiskCapacity >= info.freeDiskSpace > 0
        only_free = c.request(
            pb.GET_BOOKIE_INFO,
            getBookieInfoRequest=pb.GetBookieInfoRequest(
                requested=pb.GetBookieInfoRequest.FREE_DISK_SPACE
            ),
        )
        r = await c.conn.call(only_free)
        assert not r.getBookieInfoResponse.HasField("totalDiskCapacity")


async def test_list_of_entries(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        for entry_id in (0, 1, 2, 5, 9):
            await c.add(1, entry_id, b"e")
        req = c.request(
            pb.GET_LIST_OF_ENTRIES_OF_LEDGER,
            getListOfEntriesOfLedgerRequest=pb.GetListOfEntriesOfLedgerRequest(ledgerId=1),
        )
        r = await c.conn.call(req)
        data = r.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger
        assert decode_availability(data) == [0, 1, 2, 5, 9]
        # 64-byte header: version 0, then the number of sequence groups.
        assert struct.unpack_from(">ii", data) == (0, 3)
        assert len(data) == 64 + 3 * 24


async def test_auth_is_disabled_plugin(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        auth = pb.AuthMessage(authPluginName="x", payload=b"")
        r = await c.conn.call(c.request(pb.AUTH, authRequest=auth))
        assert status(r) == "EOK"
        assert r.authResponse.authPluginName == "AuthDisabledPlugin"


@pytest.mark.parametrize("storage", LEDGER_STORAGE_NAMES)
async def test_write_close(tmp_path: Path, storage: str) -> None:
    cfg = bookie_config(tmp_path, ledger_storage_class=storage)
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        await c.add(1, 0, b"a")
        await write_out_table(svc)
        logger = svc.bookie.storage.entry_logger
        assert logger.active_log_count == 1
        assert status(await c.write_close(1, key=KEY_OTHER)) == "EUA"
        r = await c.write_close(1)
        assert status(r) == "EOK"
        assert r.writeCloseResponse.ledgerId == 1
        assert logger.active_log_count == 0
        assert status(await c.write_close(1)) == "EOK"  # nothing left to rotate
        assert status(await c.write_close(77)) == "ENOLEDGER"


async def test_bad_version_and_unhandled_operation(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        header = pb.BKPacketHeader(version=pb.VERSION_TWO, operation=pb.READ_ENTRY, txnId=77)
        req = pb.Request(header=header, readRequest=pb.ReadRequest(ledgerId=1, entryId=0))
        r = await c.conn.call(req)
        assert status(r) == "EBADVERSION"
        assert r.header.txnId == 77
        r = await c.conn.call(c.request(pb.RANGE_READ_ENTRY))
        assert status(r) == "EBADREQ"


async def test_malformed_frames_close_only_that_connection(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as good:
        address = svc.address
        assert address is not None
        bad_inputs = [
            encode_frame(b"\xff\xff\xff\xff garbage"),
            struct.pack(">I", 5 * 1024 * 1024 + 1),  # over the frame limit
            encode_frame(pb.Request(header=good.request(pb.ADD_ENTRY).header).SerializeToString())[
                :-1
            ]
            + b"",
        ]
        for data in bad_inputs[:2]:
            async with connect(address.host, address.bookie_port) as bad:
                await bad.send_raw(data)
                with pytest.raises(ConnectionClosedError):
                    await bad.call(
                        BookieTestClient(bad).request(
                            pb.READ_ENTRY, readRequest=pb.ReadRequest(ledgerId=1, entryId=0)
                        )
                    )
        # A truncated frame followed by EOF: the bookie just drops the connection.
        async with connect(address.host, address.bookie_port) as bad:
            await bad.send_raw(bad_inputs[2])
        assert status(await good.add(1, 0, b"still serving")) == "EOK"


async def test_pipelined_requests_echo_txn_ids(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        results: dict[int, pb.Response] = {}

        async def one(conn: BookieConnection, entry_id: int) -> None:
            body = DigestManager(1, b"").package(entry_id, entry_id - 1, entry_id + 1, b"p")
            add = pb.AddRequest(ledgerId=1, entryId=entry_id, masterKey=c.key, body=body)
            req = c.request(pb.ADD_ENTRY, addRequest=add)
            results[req.header.txnId] = await conn.call(req)

        async with trio.open_nursery() as nursery:
            for entry_id in range(500):
                nursery.start_soon(one, c.conn, entry_id)
        assert len(results) == 500
        for txn_id, response in results.items():
            assert response.header.txnId == txn_id
            assert status(response) == "EOK"
        ids = sorted(r.addResponse.entryId for r in results.values())
        assert ids == list(range(500))


async def test_a_call_into_a_broken_stream_is_connection_closed_not_a_trio_error() -> None:
    # A bookie killed while a request is being sent: the send fails before the reader sees
    # the stream end. Callers (the kill -9 tests among them) expect ConnectionClosedError.
    client_end, bookie_end = trio.testing.lockstep_stream_pair()
    await bookie_end.aclose()
    conn = BookieConnection(client_end)
    request = BookieTestClient(conn).request(
        pb.READ_ENTRY, readRequest=pb.ReadRequest(ledgerId=1, entryId=0)
    )
    with pytest.raises(ConnectionClosedError, match="before txnId"):
        await conn.call(request)
    assert conn.in_flight == 0


# -- v2 (reference §1.6): the same operations, upstream's v2 codes -----------------------------


class V2Client:
    """A raw v2 connection: send packets, read answers in order (tests only)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.key = master_key(b"")

    async def send(self, request: v2.V2Request) -> None:
        await self.stream.send_all(encode_frame(v2.encode_request(request)))

    async def receive(self) -> v2.V2Response:
        while (frame := self.decoder.next_frame()) is NEED_DATA:
            data = await self.stream.receive_some(1 << 16)
            if not data:
                raise ConnectionClosedError("bookie closed the connection")
            self.decoder.receive_data(data)
        return v2.decode_response(frame)

    async def call(self, request: v2.V2Request) -> v2.V2Response:
        await self.send(request)
        return await self.receive()

    async def add(
        self, ledger_id: int, entry_id: int, payload: bytes, *, flags: int = 0, **kw: Any
    ) -> v2.V2Response:
        lac = kw.pop("lac", entry_id - 1)
        key = kw.pop("key", self.key)
        body = DigestManager(ledger_id, b"").package(entry_id, lac, entry_id + 1, payload)
        return await self.call(v2.AddRequest(key, body, flags))

    async def read(
        self, ledger_id: int, entry_id: int, *, fence: bool = False, key: bytes | None = None
    ) -> v2.V2Response:
        if not fence:
            return await self.call(v2.ReadRequest(ledger_id, entry_id))
        flags = v2.FLAG_DO_FENCING | v2.FLAG_HIGH_PRIORITY
        return await self.call(v2.ReadRequest(ledger_id, entry_id, flags, key or self.key))


@asynccontextmanager
async def v2_client(svc: BookieService) -> AsyncIterator[V2Client]:
    address = svc.address
    assert address is not None
    stream = await trio.open_tcp_stream(address.host, address.bookie_port)
    async with stream:
        yield V2Client(stream)


def code(response: v2.V2Response) -> str:
    assert not isinstance(response, v2.AuthResponse)
    return v2.ErrorCode(response.error_code).name


async def test_v2_add_read_and_errors(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, v2_client(svc) as c:
        for entry_id in range(3):
            r = await c.add(7, entry_id, b"v2-%d" % entry_id)
            assert r == v2.AddResponse(v2.ErrorCode.EOK, 7, entry_id)
        r = await c.read(7, 1)
        assert isinstance(r, v2.ReadResponse)
        assert (code(r), r.ledger_id, r.entry_id) == ("EOK", 7, 1)
        assert DigestManager(7, b"").verify(r.data, expected_entry_id=1).payload == b"v2-1"
        # Entry -1 is the last entry; the answer keeps the id asked for (as recorded).
        last = await c.read(7, -1)
        assert isinstance(last, v2.ReadResponse)
        assert last.entry_id == -1
        assert DigestManager(7, b"").verify(last.data).entry_id == 2
        assert await c.read(99, 0) == v2.ReadResponse(v2.ErrorCode.ENOLEDGER, 99, 0)
        assert await c.read(7, 9) == v2.ReadResponse(v2.ErrorCode.ENOENTRY, 7, 9)
        assert code(await c.add(7, 3, b"x", key=KEY_OTHER)) == "EUA"
        assert code(await c.read(7, 3)) == "ENOENTRY", "a rejected add must store nothing"
        assert svc.server.v2_connections == 1


async def test_v2_fencing_and_recovery_adds(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, v2_client(svc) as c:
        await c.add(1, 0, b"a")
        await c.add(1, 1, b"b")
        assert code(await c.read(1, -1, fence=True, key=KEY_OTHER)) == "EUA"
        # Version 1 reads carry no key, so a v1 fencing read cannot be authorised.
        no_key = v2.ReadRequest(1, -1, v2.FLAG_DO_FENCING, None, version=1)
        assert code(await c.call(no_key)) == "EUA"
        r = await c.read(1, -1, fence=True)
        assert isinstance(r, v2.ReadResponse)
        assert code(r) == "EOK"
        assert DigestManager(1, b"").verify(r.data).entry_id == 1
        assert code(await c.add(1, 2, b"c")) == "EFENCED"
        recovery = v2.FLAG_RECOVERY_ADD | v2.FLAG_HIGH_PRIORITY
        assert code(await c.add(1, 2, b"c", flags=recovery)) == "EOK"
        assert code(await c.add(1, 3, b"d", flags=recovery, key=KEY_OTHER)) == "EUA"
        # The fence is durable now: later fencing reads take the quick path, same answers.
        assert svc.bookie.fence_is_durable(1)
        assert code(await c.read(1, 2, fence=True)) == "EOK"
        assert code(await c.read(1, 5, fence=True)) == "ENOENTRY"
        assert code(await c.read(1, 0, fence=True, key=KEY_OTHER)) == "EUA"
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as v3:
        # Fenced over v2 is fenced for v3 too, and it survived the restart.
        assert status(await v3.add(1, 3, b"late", lac=2)) == "EFENCED"


async def test_v2_high_priority_adds_pass_an_operators_read_only(tmp_path: Path) -> None:
    """v2's FLAG_HIGH_PRIORITY is upstream's v2 high priority (``WriteEntryProcessor``):
    taken on a bookie an operator made read-only, where a plain add gets EREADONLY."""
    async with running_bookie(bookie_config(tmp_path)) as svc, v2_client(svc) as c:
        svc.bookie.set_admin_read_only(True)
        assert code(await c.add(1, 0, b"a")) == "EREADONLY"
        assert code(await c.add(1, 0, b"a", flags=v2.FLAG_RECOVERY_ADD)) == "EREADONLY"
        recovery = v2.FLAG_RECOVERY_ADD | v2.FLAG_HIGH_PRIORITY
        assert code(await c.add(1, 0, b"a", flags=recovery)) == "EOK"


async def test_v2_version_auth_and_batch_read(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, v2_client(svc) as c:
        for entry_id in range(4):
            await c.add(2, entry_id, b"e" * 100)
        # A version the bookie does not speak: EBADVERSION, in the request's own version.
        r = await c.call(v2.ReadRequest(2, 0, version=3))
        assert r == v2.ReadResponse(v2.ErrorCode.EBADVERSION, 2, 0, b"", version=3)
        # The legacy version 0 is still served.
        r = await c.call(v2.ReadRequest(2, 0, version=0))
        assert isinstance(r, v2.ReadResponse)
        assert (code(r), r.version) == ("EOK", 0)
        r = await c.call(v2.AuthRequest("someplugin", b"hello"))
        assert r == v2.AuthResponse("AuthDisabledPlugin", b"")
        batch = await c.call(v2.BatchReadRequest(2, 1, 77, 0, 1 << 20))
        assert isinstance(batch, v2.BatchReadResponse)
        assert (code(batch), batch.request_id, len(batch.entries)) == ("EOK", 77, 3)
        assert [DigestManager(2, b"").verify(e).entry_id for e in batch.entries] == [1, 2, 3]
        two = await c.call(v2.BatchReadRequest(2, 0, 78, 2, 1 << 20))
        assert isinstance(two, v2.BatchReadResponse)
        assert len(two.entries) == 2
        # The size limit counts 36 bytes of header and 4 per entry, never drops the first.
        entry_size = len(batch.entries[0])
        small = await c.call(v2.BatchReadRequest(2, 0, 79, 0, 36 + 2 * (entry_size + 4)))
        assert isinstance(small, v2.BatchReadResponse)
        assert len(small.entries) == 2
        tiny = await c.call(v2.BatchReadRequest(2, 0, 80, 0, 1))
        assert isinstance(tiny, v2.BatchReadResponse)
        assert len(tiny.entries) == 1
        missing = await c.call(v2.BatchReadRequest(2, 9, 81, 0, 1 << 20))
        assert missing == v2.BatchReadResponse(v2.ErrorCode.ENOENTRY, 2, 9, 81)


async def test_v3_and_v2_on_one_port_and_bad_v2_frames_close_only_their_connection(
    tmp_path: Path,
) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as v3:
        assert status(await v3.add(1, 0, b"by v3")) == "EOK"
        async with v2_client(svc) as c:
            r = await c.read(1, 0)
            assert isinstance(r, v2.ReadResponse)
            assert DigestManager(1, b"").verify(r.data).payload == b"by v3"
            # Once v2, always v2: a v3 frame on this connection is a bad v2 frame.
            v3_frame = v3.request(pb.READ_ENTRY, readRequest=pb.ReadRequest(ledgerId=1, entryId=0))
            await c.stream.send_all(encode_frame(v3_frame.SerializeToString()))
            with pytest.raises(ConnectionClosedError):
                await c.receive()
        bad = [
            bytes.fromhex("02040000") + bytes(8),  # READ_LAC: upstream has no v2 decoding
            bytes.fromhex("02020000") + bytes(3),  # a torn read
            b"\xff\xff",  # neither v3 nor v2
        ]
        for packet in bad:
            async with v2_client(svc) as c:
                await c.stream.send_all(encode_frame(packet))
                with pytest.raises(ConnectionClosedError):
                    await c.receive()
        # Both protocols still served.
        assert status(await v3.read(1, 0)) == "EOK"
        async with v2_client(svc) as c:
            assert code(await c.add(1, 1, b"by v2")) == "EOK"
        assert status(await v3.read(1, 1)) == "EOK"


def _tiny_sorted_table(tmp_path: Path) -> BookieConfig:
    """Sorted storage whose table is full at 16 KiB and flushed only at its limit."""
    return bookie_config(
        tmp_path,
        ledger_storage_class="SortedLedgerStorage",
        skip_list_size_limit=8 * 1024,
        flush_interval=3_600_000,
    )


async def _hold_the_flush(
    storage: LedgerStorage, release: trio.Event, task_status: trio.TaskStatus[None]
) -> None:
    """No flush makes room until ``release`` is set."""
    async with storage._flush_lock:  # type: ignore[attr-defined]
        task_status.started()
        await release.wait()


async def test_a_full_sorted_table_stops_reading_adds_until_a_flush_makes_room(
    tmp_path: Path,
) -> None:
    """Upstream's throttle, through a connection: with the flush held, adds fill the table
    and its snapshot to twice skipListSizeLimit, then the bookie stops reading that
    connection's adds, while reads on another are answered; once the flush runs, the rest
    come in and every add is acknowledged."""
    cfg = _tiny_sorted_table(tmp_path)
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        storage = svc.bookie.storage
        release = trio.Event()

        statuses: dict[int, str] = {}

        async def add(entry_id: int) -> None:
            statuses[entry_id] = status(await c.add(1, entry_id, b"z" * 1024))

        async with trio.open_nursery() as nursery:
            await nursery.start(_hold_the_flush, storage, release)
            for entry_id in range(64):  # 64 KiB: four times the limit
                nursery.start_soon(add, entry_id)
            with trio.move_on_after(1.0):
                while len(statuses) < 64:  # noqa: ASYNC110
                    await trio.sleep(0.02)
            assert storage.adds_must_wait
            assert 16 <= len(statuses) < 64, "the bookie read on past twice the limit"
            # Only adds wait: a reader's connection is served meanwhile, from the table.
            async with bookie_client(svc) as reader:
                with trio.fail_after(2):
                    assert status(await reader.read(1, min(statuses))) == "EOK"
            release.set()
        assert statuses == dict.fromkeys(range(64), "EOK")
        assert storage.entry_ids(1) == list(range(64))
        body, _ = svc.metrics.render()
        waits = re.search(r"^bookie_skip_list_throttling_total (\S+)$", body.decode(), re.M)
        assert waits is not None
        assert float(waits.group(1)) >= 1


async def test_over_v2_too_only_adds_wait_for_a_full_sorted_table(tmp_path: Path) -> None:
    """The same throttle for v2 connections (Pulsar's brokers speak v2): with the table
    full and the flush held, a v2 add waits while a v2 read on another connection is
    answered; the add is acknowledged once the flush makes room."""
    cfg = _tiny_sorted_table(tmp_path)
    async with running_bookie(cfg) as svc, v2_client(svc) as filler:
        storage = svc.bookie.storage
        release = trio.Event()

        async with trio.open_nursery() as nursery:
            await nursery.start(_hold_the_flush, storage, release)
            entry_id = 0
            while not storage.adds_must_wait:
                assert code(await filler.add(1, entry_id, b"z" * 1024)) == "EOK"
                entry_id += 1
            async with v2_client(svc) as writer, v2_client(svc) as reader:
                await writer.send(
                    v2.AddRequest(
                        writer.key,
                        DigestManager(1, b"").package(entry_id, -1, 1, b"late"),
                        0,
                    )
                )
                with trio.fail_after(2):
                    assert code(await reader.read(1, 0)) == "EOK"
                with trio.move_on_after(0.3) as waited:
                    await writer.receive()
                assert waited.cancelled_caught, "the add was not held back"
                release.set()
                with trio.fail_after(5):
                    assert code(await writer.receive()) == "EOK"
        assert storage.entry_ids(1) == list(range(entry_id + 1))
