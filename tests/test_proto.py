"""The committed protobuf modules are fresh and field-compatible with upstream's bytes."""

from __future__ import annotations

from bookiesim.proto import BookkeeperProtocol_pb2 as bk
from bookiesim.proto import MLDataFormats_pb2 as ml
from bookiesim.proto import regenerate


def test_generated_modules_are_not_stale() -> None:
    assert regenerate.stale_modules() == []


def test_add_request_matches_reference_appendix_frame() -> None:
    # Reference appendix A: the v3 AddRequest for "hello", entry 0 of ledger 1, empty password.
    key = bytes.fromhex("850bf1071c5e3d8c24235676f8816ae0cbe2f14f")
    body = bytes.fromhex(
        "00000000000000010000000000000000ffffffffffffffff0000000000000005e3a5f74d68656c6c6f"
    )
    req = bk.Request(
        header=bk.BKPacketHeader(version=bk.VERSION_THREE, operation=bk.ADD_ENTRY, txnId=1),
        addRequest=bk.AddRequest(ledgerId=1, entryId=0, masterKey=key, body=body),
    )
    expected = bytes.fromhex("0a06080310021801aa0645080110001a14") + key + b"\x22\x29" + body
    assert req.SerializeToString() == expected
    assert len(expected) == 0x50


def test_eok_status_is_on_the_wire() -> None:
    # proto2 `required` makes EOK (0) explicit; upstream clients need the field present.
    resp = bk.Response(
        header=bk.BKPacketHeader(version=bk.VERSION_THREE, operation=bk.ADD_ENTRY, txnId=7),
        status=bk.EOK,
    )
    assert b"\x10\x00" in resp.SerializeToString()


def test_write_close_uses_extension_numbers() -> None:
    req = bk.Request(
        header=bk.BKPacketHeader(version=bk.VERSION_THREE, operation=bk.WRITE_CLOSE, txnId=2),
        writeCloseRequest=bk.WriteCloseRequest(ledgerId=9, masterKey=b"k"),
    )
    data = req.SerializeToString()
    assert bk.WRITE_CLOSE == 32
    # field 132, wire type 2 -> varint tag 0x422 -> bytes a2 08
    assert b"\xa2\x08" in data
    assert bk.Request.FromString(data).writeCloseRequest.ledgerId == 9


def test_write_close_reason_is_optional_field_3() -> None:
    # The old form (no reason) keeps its bytes, so bookies and clients from before the field
    # exchange the same frames; a reason is one varint field 3 that an older parser skips.
    old = bk.WriteCloseRequest(ledgerId=9, masterKey=b"k")
    assert old.SerializeToString() == bytes.fromhex("080912016b")
    assert bk.WriteCloseRequest.FromString(old.SerializeToString()).reason == (
        bk.WriteCloseRequest.WRITER_CLOSED
    )
    replication = bk.WriteCloseRequest(
        ledgerId=9, masterKey=b"k", reason=bk.WriteCloseRequest.REPLICATION
    )
    data = replication.SerializeToString()
    assert data == old.SerializeToString() + bytes.fromhex("1801")
    parsed = bk.WriteCloseRequest.FromString(data)
    assert parsed.reason == bk.WriteCloseRequest.REPLICATION


def test_add_request_without_flag_is_not_recovery() -> None:
    # proto2 pitfall: an unset optional enum reads as its first value (RECOVERY_ADD).
    add = bk.AddRequest(ledgerId=1, entryId=0, masterKey=b"", body=b"")
    parsed = bk.AddRequest.FromString(add.SerializeToString())
    assert not parsed.HasField("flag")


def test_open_ledger_info_bytes_match_reference() -> None:
    # reference/pulsar.md section 1: an open ledger (ledgerId=5, timestamp=0) is 08 05 20 00.
    info = ml.ManagedLedgerInfo.LedgerInfo(ledgerId=5, timestamp=0)
    assert info.SerializeToString() == bytes.fromhex("08052000")


def test_ledger_info_properties_is_field_six() -> None:
    info = ml.ManagedLedgerInfo.LedgerInfo(ledgerId=1, properties=[ml.KeyValue(key="k", value="v")])
    # ledgerId (08 01), then field 6 length-delimited (32 06) holding KeyValue{k, v}
    assert info.SerializeToString() == bytes.fromhex("080132060a016b120176")
