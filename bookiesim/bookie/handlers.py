"""Request processing, v3 and v2: one function per operation, status codes exactly as §1.7.

Each handler gets the parsed request and a ``respond`` callable. Operations that finish
on the spot (reads, most errors) respond before returning; adds respond from the journal's
completion callback, so no task is spawned per add. Operations that must wait (fencing
reads, long polls) are run as tasks by the connection: :func:`needs_task` says which.

v2 requests (:mod:`bookiesim.proto.v2`, what Pulsar's brokers send) are served by the same
operations as v3: what an add, a read or a fencing read does, and which error it fails
with, lives in the protocol-neutral methods under "operations shared by v3 and v2" and in
:class:`~bookiesim.bookie.bookie.Bookie`; the ``_v2`` methods only decode arguments and
encode the answer. Errors carry v3 statuses (:class:`BookieError`) and are answered in v2
with the same-named v2 code, which is how upstream's v2 processors (``WriteEntryProcessor``,
``ReadEntryProcessor``) map the same exceptions.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeAlias

from bookiesim.bookie.errors import BadRequestError, BookieError, UnauthorizedError
from bookiesim.bookie.ledger_storage import entry_header
from bookiesim.entrylog.reader import EntryReadError
from bookiesim.entrylog.rotation import RotationReason
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from bookiesim.proto.availability import encode_availability
from bookiesim.proto.frames import encode_frame
from bookiesim.proto.v3 import encode_add_response, error_response, parse_request, response_for

if TYPE_CHECKING:
    from bookiesim.bookie.bookie import Bookie
    from bookiesim.proto.v3_add import AddFields

log = logging.getLogger(__name__)

# A response object, or an already framed response (the add path's fast encoding).
Respond = Callable[[pb.Response | bytes], None]
Status: TypeAlias = pb.StatusCode.ValueType
OPERATION_NAMES = {value: name.lower() for name, value in pb.OperationType.items()}
STATUS_NAMES = {value: name for name, value in pb.StatusCode.items()}
AUTH_DISABLED_PLUGIN = "AuthDisabledPlugin"
DEFERRED_SYNC = 0x1
MAX_BATCH_READ_SIZE = 5 * 1024 * 1024
"""Upstream's ``maxBatchReadSize`` default: a v2 batch read answers at most this many bytes
(or what the request asks, if less), but always at least its first entry."""
_BATCH_RESPONSE_OVERHEAD = 24 + 8 + 4
"""What upstream counts before the entries when it sizes a batch read response."""
DISK_ERRORS = (OSError, EntryReadError)
"""What the disk may raise under an operation (a read the device refused, a log gone, an
entry whose bytes are not what its location says): answered EIO, as upstream's processors
answer an ``IOException``, with one WARNING line. The bookie stays up and forgets nothing: a
failed read says nothing of what is stored, and the client reads another replica."""
V2_NAMES = {
    v2.OpCode.ADD_ENTRY: "add_entry",
    v2.OpCode.READ_ENTRY: "read_entry",
    v2.OpCode.BATCH_READ_ENTRY: "batch_read_entry",
    v2.OpCode.AUTH: "auth",
}


class RequestProcessor:
    """Dispatches requests of every connection to one :class:`Bookie`."""

    def __init__(self, bookie: Bookie) -> None:
        self.bookie = bookie
        self.metrics = bookie.metrics

    def throttle(self) -> Callable[[], Awaitable[None]] | None:
        """None while adds may go on; else what a connection awaits before its next add:
        the ledger storage holds as many unwritten adds as it may (the sorted table at
        twice ``skipListSizeLimit``). That connection stops reading until a flush makes
        room, as upstream's add thread blocks on the table's semaphore; reads, on other
        connections or already read, go on, as upstream's read threads do."""
        if not self.bookie.storage.adds_must_wait:
            return None
        return self._throttled

    async def _throttled(self) -> None:
        started = time.perf_counter()
        await self.bookie.storage.wait_for_room()
        self.metrics.add_throttled(time.perf_counter() - started)

    def needs_task(self, request: pb.Request) -> bool:
        """Whether the request may have to wait (a task of its own): long polls, and fencing
        reads until the ledger's fence is durable. Recovery sends a fencing read for every
        entry it reads; once the first fence is journaled the rest are plain reads with a
        key check, and a task each would cost the bookie more than the read itself."""
        if request.header.operation != pb.READ_ENTRY or not request.HasField("readRequest"):
            return False
        read = request.readRequest
        if read.HasField("previousLAC"):
            return True
        fencing = read.HasField("flag") and read.flag == pb.ReadRequest.FENCE_LEDGER
        return fencing and self.fence_pending(read.ledgerId)

    def _finish(
        self, request: pb.Request, response: pb.Response, started: float, respond: Respond
    ) -> None:
        op = OPERATION_NAMES.get(request.header.operation, "unknown")
        self.metrics.request(
            op, STATUS_NAMES.get(response.status, "UNKNOWN"), time.perf_counter() - started
        )
        respond(response)

    def process(self, request: pb.Request, respond: Respond) -> None:
        """Handle an operation that does not wait (everything but :meth:`needs_task`)."""
        started = time.perf_counter()
        if request.header.version != pb.VERSION_THREE:
            self._finish(request, response_for(request, pb.EBADVERSION), started, respond)
            return
        op = request.header.operation
        handler = _SYNC_HANDLERS.get(op)
        try:
            if handler is None:
                # Upstream's default branch: a bare response with EBADREQ.
                response = response_for(request, pb.EBADREQ)
            else:
                maybe = handler(self, request, started, respond)
                if maybe is None:
                    return  # responds later (journal callback)
                response = maybe
        except BookieError as exc:
            response = error_response(request, exc.status)
        except DISK_ERRORS as exc:
            _disk_error(OPERATION_NAMES.get(op, str(op)), exc)
            response = error_response(request, pb.EIO)
        except Exception:
            log.exception("unexpected error handling %s", OPERATION_NAMES.get(op, op))
            response = error_response(request, pb.EBADREQ)
        self._finish(request, response, started, respond)

    async def process_waiting(self, request: pb.Request, respond: Respond) -> None:
        """Fencing reads and long-poll reads."""
        started = time.perf_counter()
        if request.header.version != pb.VERSION_THREE:
            self._finish(request, response_for(request, pb.EBADVERSION), started, respond)
            return
        try:
            response = await self._read_waiting(request)
        except BookieError as exc:
            response = error_response(request, exc.status)
        except DISK_ERRORS as exc:
            _disk_error("read_entry", exc)
            response = error_response(request, pb.EIO)
        except Exception:
            log.exception("unexpected error in a waiting read")
            response = error_response(request, pb.EBADREQ)
        self._finish(request, response, started, respond)

    # -- operations shared by v3 and v2 -------------------------------------------------------

    def fence_pending(self, ledger_id: int) -> bool:
        """A fencing read of this ledger must wait for a fence to become durable (so it
        needs a task); once the fence is journaled, fencing reads are plain keyed reads."""
        return not self.bookie.fence_is_durable(ledger_id)

    def check_fence_key(self, ledger_id: int, master_key: bytes | None) -> None:
        """A fencing read of a ledger whose fence is already durable: only the key is left
        to check (EUA when it is missing or wrong)."""
        if master_key is None:
            raise UnauthorizedError("fencing read without a master key")
        self.bookie.check_fenced(ledger_id, master_key)

    async def fence(self, ledger_id: int, master_key: bytes | None) -> None:
        """Fence the ledger and wait until that is durable (EUA without a key, EIO if the
        fence cannot be journaled)."""
        if master_key is None:
            raise UnauthorizedError("fencing read without a master key")
        await self.bookie.fence(ledger_id, master_key)

    def read_batch(
        self, ledger_id: int, first: int, max_count: int, max_size: int
    ) -> tuple[bytes, ...]:
        """Entries ``first``, ``first + 1``, ... as upstream's batch read collects them: at
        most ``max_count`` (<= 0: no limit), stopping at the first entry that cannot be read
        or would take the response past ``max_size`` (capped at :data:`MAX_BATCH_READ_SIZE`)
        — except the first entry, whose error is the answer and whose size never counts."""
        limit = min(max_size, MAX_BATCH_READ_SIZE)
        size = _BATCH_RESPONSE_OVERHEAD
        entries: list[bytes] = []
        count = max_count if max_count > 0 else 1 << 62
        while len(entries) < count:
            try:
                body, _ = self.bookie.read_entry(ledger_id, first + len(entries))
            except (BookieError, *DISK_ERRORS):
                if not entries:
                    raise
                break
            size += len(body) + 4
            if entries and size > limit:
                break
            entries.append(body)
        return tuple(entries)

    # -- helpers -----------------------------------------------------------------------

    def _require(self, request: pb.Request, field: str) -> None:
        if not request.HasField(field):  # type: ignore[arg-type]
            raise BadRequestError(
                f"{OPERATION_NAMES.get(request.header.operation)} without {field}"
            )

    # -- operations --------------------------------------------------------------------

    def _add(self, request: pb.Request, started: float, respond: Respond) -> pb.Response | None:
        self._require(request, "addRequest")
        add = request.addRequest
        self._add_entry(
            add.body,
            add.masterKey,
            request.header.txnId,
            recovery=add.HasField("flag") and add.flag == pb.AddRequest.RECOVERY_ADD,
            write_flags=add.writeFlags,
            high_priority=request.header.priority > 0,  # upstream's RequestUtils.isHighPriority
            started=started,
            respond=respond,
        )
        return None

    def process_add(self, frame: bytes, add: AddFields, respond: Respond) -> None:
        """:meth:`process` of a plain v3 add that :func:`~bookiesim.proto.v3_add.parse_add`
        read from ``frame`` without a protobuf object: the same add, the same answers. A
        refusal (rare) parses the frame after all, for the error answer's ids."""
        started = time.perf_counter()
        try:
            self._add_entry(
                add.body,
                add.master_key,
                add.txn_id,
                recovery=add.recovery,
                write_flags=add.write_flags,
                high_priority=add.high_priority,
                started=started,
                respond=respond,
            )
            return
        except BookieError as exc:
            status = exc.status
        except DISK_ERRORS as exc:
            _disk_error(OPERATION_NAMES[pb.ADD_ENTRY], exc)
            status = pb.EIO
        except Exception:
            log.exception("unexpected error handling %s", OPERATION_NAMES[pb.ADD_ENTRY])
            status = pb.EBADREQ
        request = parse_request(frame)
        self._finish(request, error_response(request, status), started, respond)

    def _add_entry(
        self,
        body: bytes,
        master_key: bytes,
        txn_id: int,
        *,
        recovery: bool,
        write_flags: int,
        high_priority: bool,
        started: float,
        respond: Respond,
    ) -> None:
        """Store and journal one v3 add; the answer goes out from the journal's callback."""
        # Ids come from the body, not from AddRequest's fields (upstream does the same).
        header = entry_header(body)
        metrics = self.metrics

        def done(error: BaseException | None) -> None:
            status = pb.EOK if error is None else pb.EIO
            respond(encode_add_response(txn_id, status, header.ledger_id, header.entry_id))
            metrics.request(
                "add_entry", "EOK" if error is None else "EIO", time.perf_counter() - started
            )

        self.bookie.add_entry(
            body,
            master_key,
            done,
            recovery=recovery,
            ack_before_sync=bool(write_flags & DEFERRED_SYNC),
            header=header,
            high_priority=high_priority,
        )

    def _read(self, request: pb.Request, started: float, respond: Respond) -> pb.Response:
        self._require(request, "readRequest")
        read = request.readRequest
        if read.HasField("flag") and read.flag == pb.ReadRequest.ENTRY_PIGGYBACK:
            # Piggyback without previousLAC is malformed (§1.7).
            raise BadRequestError("ENTRY_PIGGYBACK without previousLAC")
        fencing = read.HasField("flag") and read.flag == pb.ReadRequest.FENCE_LEDGER
        if fencing:
            # Only here when the fence is already durable (needs_task): check the key.
            self.check_fence_key(read.ledgerId, _master_key(read))
        body, lac = self.bookie.read_entry(read.ledgerId, read.entryId)
        return self._read_response(request, body, None if fencing else lac)

    def _read_response(
        self, request: pb.Request, body: bytes | None, lac: int | None
    ) -> pb.Response:
        """EOK with the entry; ``lac`` is the bookie's LAC for ``maxLAC``, which upstream
        leaves out of fencing reads' answers (as recorded: conn 5 of the wire vectors)."""
        read = request.readRequest
        response = response_for(request, pb.EOK)
        rr = response.readResponse
        rr.status = pb.EOK
        rr.ledgerId = read.ledgerId
        rr.entryId = read.entryId
        if body is not None:
            rr.body = body
        if lac is not None:
            rr.maxLAC = lac
        return response

    async def _read_waiting(self, request: pb.Request) -> pb.Response:
        self._require(request, "readRequest")
        read = request.readRequest
        bookie = self.bookie
        if read.HasField("flag") and read.flag == pb.ReadRequest.FENCE_LEDGER:
            await self.fence(read.ledgerId, _master_key(read))
            body, _ = bookie.read_entry(read.ledgerId, read.entryId)
            return self._read_response(request, body, None)
        # Long poll.
        piggyback = read.HasField("flag") and read.flag == pb.ReadRequest.ENTRY_PIGGYBACK
        if piggyback and read.entryId != -1:
            raise BadRequestError("ENTRY_PIGGYBACK needs entryId -1")
        timeout = max(read.timeOut, 0) / 1000 if read.HasField("timeOut") else 0.0
        await bookie.wait_for_lac(read.ledgerId, read.previousLAC, timeout)
        lac = bookie.last_add_confirmed(read.ledgerId)
        if piggyback:
            if lac <= read.previousLAC:
                return self._read_response(request, None, lac)
            # EOK without a body when this bookie does not hold the next entry (§1.7).
            next_body: bytes | None = None
            with contextlib.suppress(BookieError):
                next_body, lac = bookie.read_entry(read.ledgerId, read.previousLAC + 1)
            return self._read_response(request, next_body, lac)
        body, lac = bookie.read_entry(read.ledgerId, read.entryId)
        return self._read_response(request, body, lac)

    def _write_lac(
        self, request: pb.Request, started: float, respond: Respond
    ) -> pb.Response | None:
        self._require(request, "writeLacRequest")
        wl = request.writeLacRequest

        def done(error: BaseException | None) -> None:
            status = pb.EOK if error is None else pb.EIO
            response = response_for(request, status)
            response.writeLacResponse.CopyFrom(
                pb.WriteLacResponse(status=status, ledgerId=wl.ledgerId)
            )
            self._finish(request, response, started, respond)

        self.bookie.write_lac(wl.ledgerId, wl.lac, wl.masterKey, wl.body, done)
        return None

    def _read_lac(self, request: pb.Request, started: float, respond: Respond) -> pb.Response:
        self._require(request, "readLacRequest")
        ledger_id = request.readLacRequest.ledgerId
        explicit, last = self.bookie.read_lac(ledger_id)
        if explicit is None and last is None:
            return error_response(request, pb.ENOENTRY)
        response = response_for(request, pb.EOK)
        rl = response.readLacResponse
        rl.status = pb.EOK
        rl.ledgerId = ledger_id
        if explicit is not None:
            rl.lacBody = explicit
        if last is not None:
            rl.lastEntryBody = last
        return response

    def _force_ledger(
        self, request: pb.Request, started: float, respond: Respond
    ) -> pb.Response | None:
        self._require(request, "forceLedgerRequest")
        ledger_id = request.forceLedgerRequest.ledgerId

        def done(error: BaseException | None) -> None:
            status = pb.EOK if error is None else pb.EIO
            response = response_for(request, status)
            response.forceLedgerResponse.CopyFrom(
                pb.ForceLedgerResponse(status=status, ledgerId=ledger_id)
            )
            self._finish(request, response, started, respond)

        self.bookie.force_ledger(ledger_id, done)
        return None

    def _bookie_info(self, request: pb.Request, started: float, respond: Respond) -> pb.Response:
        requested = (
            request.getBookieInfoRequest.requested
            if request.HasField("getBookieInfoRequest")
            else 0
        )
        total, free = self.bookie.disk_usage()
        response = response_for(request, pb.EOK)
        info = response.getBookieInfoResponse
        info.status = pb.EOK
        if requested & pb.GetBookieInfoRequest.TOTAL_DISK_CAPACITY:
            info.totalDiskCapacity = total
        if requested & pb.GetBookieInfoRequest.FREE_DISK_SPACE:
            info.freeDiskSpace = free
        return response

    def _list_entries(self, request: pb.Request, started: float, respond: Respond) -> pb.Response:
        self._require(request, "getListOfEntriesOfLedgerRequest")
        ledger_id = request.getListOfEntriesOfLedgerRequest.ledgerId
        entries = self.bookie.entry_ids(ledger_id)
        response = response_for(request, pb.EOK)
        out = response.getListOfEntriesOfLedgerResponse
        out.status = pb.EOK
        out.ledgerId = ledger_id
        out.availabilityOfEntriesOfLedger = encode_availability(entries)
        return response

    def _auth(self, request: pb.Request, started: float, respond: Respond) -> pb.Response:
        # Auth is disabled: every connection is authenticated; a stray AUTH gets EOK.
        response = response_for(request, pb.EOK)
        response.authResponse.CopyFrom(
            pb.AuthMessage(authPluginName=AUTH_DISABLED_PLUGIN, payload=b"")
        )
        return response

    def _write_close(self, request: pb.Request, started: float, respond: Respond) -> pb.Response:
        self._require(request, "writeCloseRequest")
        wc = request.writeCloseRequest
        # proto2 parses a reason this bookie does not know as absent (the writer closed).
        reason = (
            RotationReason.REPLICATION
            if wc.reason == pb.WriteCloseRequest.REPLICATION
            else RotationReason.WRITE_CLOSE
        )
        try:
            outcome = self.bookie.write_close(wc.ledgerId, wc.masterKey, reason)
        except BookieError as exc:
            label = {pb.ENOLEDGER: "unknown_ledger", pb.EUA: "bad_key"}.get(exc.status, "error")
            self.metrics.write_close(label)
            raise
        self.metrics.write_close(outcome)
        response = response_for(request, pb.EOK)
        response.writeCloseResponse.CopyFrom(
            pb.WriteCloseResponse(status=pb.EOK, ledgerId=wc.ledgerId)
        )
        return response

    # -- v2 ------------------------------------------------------------------------------
    # The same operations for v2 packets; answers are framed v2 bytes (flags 0, the
    # request's version, error codes mapped from the v3 statuses).

    def needs_task_v2(self, request: v2.V2Request) -> bool:
        """As :meth:`needs_task`: fencing reads until the fence is durable (v2 has no long
        polls)."""
        if isinstance(request, v2.ReadRequest | v2.BatchReadRequest) and request.fencing:
            return self.fence_pending(request.ledger_id)
        return False

    def process_v2(self, request: v2.V2Request, respond: Respond) -> None:
        """Handle a v2 request that does not wait."""
        started = time.perf_counter()
        if isinstance(request, v2.AuthRequest):
            # Upstream answers AUTH before any version check, with its own version.
            self._finish_v2(request, _auth_response_v2(), pb.EOK, started, respond)
            return
        if not 0 <= request.version <= v2.CURRENT_PROTOCOL_VERSION:
            response = v2.error_response(request, pb.EBADVERSION)
            self._finish_v2(request, response, pb.EBADVERSION, started, respond)
            return
        try:
            if isinstance(request, v2.AddRequest):
                self._add_v2(request, started, respond)
                return  # answered from the journal callback
            if request.fencing:
                # Only here when the fence is already durable (needs_task_v2).
                self.check_fence_key(request.ledger_id, request.master_key)
            response = self._read_v2(request)
        except BookieError as exc:
            response = v2.error_response(request, exc.status)
        except DISK_ERRORS as exc:
            _disk_error(V2_NAMES[v2.opcode_of(request)], exc)
            response = v2.error_response(request, pb.EIO)
        except Exception:
            log.exception("unexpected error handling a v2 %s", type(request).__name__)
            response = v2.error_response(request, pb.EBADREQ)
        self._finish_v2(request, response, response.error_code, started, respond)

    async def process_waiting_v2(self, request: v2.V2Request, respond: Respond) -> None:
        """Fencing reads whose fence is not durable yet."""
        started = time.perf_counter()
        assert isinstance(request, v2.ReadRequest | v2.BatchReadRequest)
        if not 0 <= request.version <= v2.CURRENT_PROTOCOL_VERSION:
            response = v2.error_response(request, pb.EBADVERSION)
            self._finish_v2(request, response, pb.EBADVERSION, started, respond)
            return
        try:
            await self.fence(request.ledger_id, request.master_key)
            response = self._read_v2(request)
        except BookieError as exc:
            response = v2.error_response(request, exc.status)
        except DISK_ERRORS as exc:
            _disk_error(V2_NAMES[v2.opcode_of(request)], exc)
            response = v2.error_response(request, pb.EIO)
        except Exception:
            log.exception("unexpected error in a waiting v2 read")
            response = v2.error_response(request, pb.EBADREQ)
        self._finish_v2(request, response, response.error_code, started, respond)

    def _finish_v2(
        self,
        request: v2.V2Request,
        response: v2.V2Response,
        status: int,
        started: float,
        respond: Respond,
    ) -> None:
        op = V2_NAMES[v2.opcode_of(request)]
        name = v2.ErrorCode(status).name if status in _V2_CODES else str(status)
        self.metrics.request(op, name, time.perf_counter() - started)
        respond(encode_frame(v2.encode_response(response)))

    def _add_v2(self, request: v2.AddRequest, started: float, respond: Respond) -> None:
        body = request.body
        header = entry_header(body)
        version = request.version
        metrics = self.metrics

        def done(error: BaseException | None) -> None:
            rc = v2.ErrorCode.EOK if error is None else v2.ErrorCode.EIO
            respond(v2.encode_add_response(rc, header.ledger_id, header.entry_id, version))
            metrics.request("add_entry", rc.name, time.perf_counter() - started)

        # v2 has no write flags: no DEFERRED_SYNC.
        self.bookie.add_entry(
            body,
            request.master_key,
            done,
            recovery=request.recovery,
            header=header,
            high_priority=request.high_priority,
        )

    def _read_v2(
        self, request: v2.ReadRequest | v2.BatchReadRequest
    ) -> v2.ReadResponse | v2.BatchReadResponse:
        if isinstance(request, v2.ReadRequest):
            body, _ = self.bookie.read_entry(request.ledger_id, request.entry_id)
            return v2.ReadResponse(
                v2.ErrorCode.EOK, request.ledger_id, request.entry_id, body, request.version
            )
        entries = self.read_batch(
            request.ledger_id, request.entry_id, request.max_count, request.max_size
        )
        return v2.BatchReadResponse(
            v2.ErrorCode.EOK,
            request.ledger_id,
            request.entry_id,
            request.request_id,
            entries,
            request.version,
        )


_SYNC_HANDLERS: dict[
    int, Callable[[RequestProcessor, pb.Request, float, Respond], pb.Response | None]
] = {
    pb.ADD_ENTRY: RequestProcessor._add,
    pb.READ_ENTRY: RequestProcessor._read,
    pb.WRITE_LAC: RequestProcessor._write_lac,
    pb.READ_LAC: RequestProcessor._read_lac,
    pb.FORCE_LEDGER: RequestProcessor._force_ledger,
    pb.GET_BOOKIE_INFO: RequestProcessor._bookie_info,
    pb.GET_LIST_OF_ENTRIES_OF_LEDGER: RequestProcessor._list_entries,
    pb.AUTH: RequestProcessor._auth,
    pb.WRITE_CLOSE: RequestProcessor._write_close,
}
"""The operations that do not wait, by operation type (outside the class: a compiled class
body holds no table of its own methods)."""


def _disk_error(operation: str, exc: BaseException) -> None:
    log.warning("%s answered EIO: %s", operation, exc)


def _master_key(read: pb.ReadRequest) -> bytes | None:
    return read.masterKey if read.HasField("masterKey") else None


_V2_CODES = frozenset(int(code) for code in v2.ErrorCode)


def _auth_response_v2() -> v2.AuthResponse:
    # Auth is disabled: as in v3, a stray AUTH is answered by the "disabled" plugin.
    return v2.AuthResponse(AUTH_DISABLED_PLUGIN, b"")
