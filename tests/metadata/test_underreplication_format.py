"""The auto-recovery records' codecs and paths, without a store.

Each text record is checked three ways: the bytes upstream wrote for known fields (the
vectors' values, spelled here; ``tests/interop/test_zk_underreplication.py`` reads the files
themselves), a round trip over arbitrary fields, and — since upstream prints strings with
protobuf-java's escapes — against the cookie module's independent implementation of those
escapes. Any bytes given to a decoder either decode or raise one ``ValueError`` line naming
the node.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bookiesim.metadata.errors import CorruptMetadataError
from bookiesim.metadata.text_format import quote
from bookiesim.metadata.underreplication_format import (
    UnderReplicationFormatError,
    decode_check_all_ledgers_ctime,
    decode_layout,
    decode_lock,
    decode_mark,
    decode_recovery_delay,
    decode_vote,
    encode_check_all_ledgers_ctime,
    encode_layout,
    encode_lock,
    encode_mark,
    encode_recovery_delay,
    encode_vote,
    ledger_id_of_mark,
    lock_name,
    lock_path,
    mark_path,
    underreplication_path,
    vote_sequence,
)

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
LEDGER_IDS = st.integers(0, 2**63 - 1)
# Any text protobuf can hold: every code point but the surrogates (not UTF-8).
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


# --- the bytes upstream wrote --------------------------------------------------------------


def test_upstreams_bytes_for_known_fields() -> None:
    assert encode_layout() == b'type: "BASIC"\nversion: 1\n'
    assert decode_layout(b'type: "BASIC"\nversion: 1\n') == ("BASIC", 1)
    mark = b'replica: "127.0.0.1:34183"\nctime: 1795529350202\n'
    assert encode_mark(["127.0.0.1:34183"], 1795529350202) == mark
    assert decode_mark(mark) == (("127.0.0.1:34183",), 1795529350202)
    assert encode_lock("localhost") == b'bookieId: "localhost"\n'
    assert decode_lock(b'bookieId: "localhost"\n') == "localhost"
    assert encode_vote("127.0.0.1:3181") == b'bookieId: "127.0.0.1:3181"\n'
    assert decode_vote(b'bookieId: "127.0.0.1:3181"\n') == "127.0.0.1:3181"
    assert encode_recovery_delay(0) == b"0"
    assert decode_recovery_delay(b"0") == 0


def test_optional_fields_left_out() -> None:
    assert encode_mark([], None) == b""
    assert decode_mark(b"") == ((), None)
    assert encode_mark(["a", "b"], None) == b'replica: "a"\nreplica: "b"\n'
    assert encode_lock(None) == b""
    assert decode_lock(b"") is None
    assert decode_vote(b"") is None
    # An empty string is a value, printed as protobuf-java prints a set field.
    assert encode_lock("") == b'bookieId: ""\n'
    assert decode_lock(b'bookieId: ""\n') == ""


def test_read_as_leniently_as_upstreams_merge() -> None:
    # Fields in any order, a singular field twice keeps the last value, whitespace free.
    assert decode_mark(b'ctime: 5 replica: "x"\nreplica: "y"') == (("x", "y"), 5)
    assert decode_lock(b'bookieId: "a"\nbookieId: "b"\n') == "b"
    assert decode_layout(b'version: 1 type: "BASIC"') == ("BASIC", 1)


def test_check_all_ledgers_ctime_is_binary_as_upstream_writes_it() -> None:
    # Upstream's setCheckAllLedgersCTime stores toByteArray(): field 1, varint.
    assert encode_check_all_ledgers_ctime(1) == b"\x08\x01"
    assert decode_check_all_ledgers_ctime(b"\x08\x01") == 1
    assert decode_check_all_ledgers_ctime(b"") is None


def test_paths_as_upstream_spells_them() -> None:
    assert underreplication_path("/ledgers") == "/ledgers/underreplication"
    assert (
        mark_path("/ledgers", 3)
        == "/ledgers/underreplication/ledgers/0000/0000/0000/0003/urL0000000003"
    )
    # Upstream's own example in ZkLedgerUnderreplicationManager: 0xcafebeef0000feed.
    big = 0x7AFEBEEF0000FEED
    assert mark_path("/bk", big) == f"/bk/underreplication/ledgers/7afe/beef/0000/feed/urL{big}"
    assert lock_path("/", 42) == "/underreplication/locks/urL0000000042"
    assert lock_name(10**10) == "urL10000000000"


def test_bad_arguments_refused() -> None:
    for bad in (-1, 2**63):
        with pytest.raises(ValueError, match="ledger id must be in"):
            mark_path("/ledgers", bad)
    with pytest.raises(TypeError):
        lock_path("/ledgers", True)
    with pytest.raises(ValueError, match="absolute"):
        mark_path("ledgers", 1)
    for seconds in (2**31, -(2**31) - 1):
        with pytest.raises(ValueError, match="32-bit"):
            encode_recovery_delay(seconds)


def test_node_names() -> None:
    assert ledger_id_of_mark("urL0000000042") == 42
    assert ledger_id_of_mark(f"urL{2**63 - 1}") == 2**63 - 1
    for name in (
        "urL42",
        "urL",
        "L0000000042",
        "urL0000000042x",
        f"urL{2**63}",
        "urL" + "\u0660" * 10,
    ):
        assert ledger_id_of_mark(name) is None, name
    assert vote_sequence("V_0000000007") == 7
    assert vote_sequence("V_") is None
    assert vote_sequence("X_0000000007") is None


def test_errors_name_the_node() -> None:
    where = "/ledgers/underreplication/ledgers/0000/0000/0000/0001/urL0000000001"
    with pytest.raises(UnderReplicationFormatError, match=f"^{where}: not an under-replicated"):
        decode_mark(b"replica: 5\n", where)
    with pytest.raises(UnderReplicationFormatError, match="not UTF-8"):
        decode_lock(b'bookieId: "\xff"\n', "/l")
    with pytest.raises(UnderReplicationFormatError, match="type, version missing"):
        decode_layout(b"", "/LAYOUT")
    with pytest.raises(UnderReplicationFormatError, match="is not a 32-bit integer"):
        decode_recovery_delay(b" 5", "/d")
    assert issubclass(UnderReplicationFormatError, CorruptMetadataError)
    assert issubclass(UnderReplicationFormatError, ValueError)


# --- properties ---------------------------------------------------------------------------


@given(st.lists(TEXT, max_size=5), st.none() | INT64)
def test_mark_round_trip(replicas: list[str], ctime: int | None) -> None:
    data = encode_mark(replicas, ctime)
    assert decode_mark(data, "m") == (tuple(replicas), ctime)
    expected = "".join(f"replica: {quote(r)}\n" for r in replicas)
    if ctime is not None:
        expected += f"ctime: {ctime}\n"
    assert data == expected.encode("ascii")


def test_strings_escaped_as_protobuf_java_does() -> None:
    # protobuf-java's TextFormat.escapeBytes: these named, other non-printables (and every
    # byte of a non-ASCII character's UTF-8) as three octal digits.
    text = "\x07\x08\x0b\x0c\\007'\"\x7f\u00e9\x00"
    java = b"\\a\\b\\v\\f\\\\007\\'\\\"\\177\\303\\251\\000"
    for encode, decode in ((encode_lock, decode_lock), (encode_vote, decode_vote)):
        data = encode(text)
        assert data == b'bookieId: "' + java + b'"\n'
        assert decode(data, "n") == text


@given(TEXT)
@example("\x07\x08\x0b\x0c\\007'\"\x7f\u00e9\U0001f600\x00")
def test_any_string_round_trips(text: str) -> None:
    for encode, decode in ((encode_lock, decode_lock), (encode_vote, decode_vote)):
        data = encode(text)
        assert data.isascii()
        assert decode(data, "n") == text


@given(TEXT, INT32)
def test_layout_round_trip(layout_type: str, version: int) -> None:
    assert decode_layout(encode_layout(layout_type, version), "l") == (layout_type, version)


@given(INT32)
def test_recovery_delay_round_trip(seconds: int) -> None:
    assert decode_recovery_delay(encode_recovery_delay(seconds), "d") == seconds


@given(INT64)
def test_check_all_ledgers_ctime_round_trip(ms: int) -> None:
    assert decode_check_all_ledgers_ctime(encode_check_all_ledgers_ctime(ms), "c") == ms


@given(LEDGER_IDS)
def test_mark_path_spells_the_id_twice(ledger_id: int) -> None:
    path = mark_path("/ledgers", ledger_id)
    *dirs, name = path.split("/")[4:]
    assert path.startswith("/ledgers/underreplication/ledgers/")
    assert len(dirs) == 4
    assert all(re.fullmatch(r"[0-9a-f]{4}", d) for d in dirs)
    assert int("".join(dirs), 16) == ledger_id
    assert ledger_id_of_mark(name) == ledger_id
    assert lock_path("/ledgers", ledger_id).rsplit("/", 1)[1] == name


_DECODERS = [
    decode_layout,
    decode_mark,
    decode_lock,
    decode_vote,
    decode_recovery_delay,
    decode_check_all_ledgers_ctime,
]


@given(st.sampled_from(_DECODERS), st.binary(max_size=60) | TEXT.map(str.encode))
@example(decode_mark, b'replica: "\\')
@example(decode_mark, b"ctime: 99999999999999999999")
@example(decode_check_all_ledgers_ctime, b"\x08")
@example(decode_lock, b'bookieId: "\\377"')
@example(decode_vote, b'bookieId: "\\u12"')
@example(decode_vote, b"bookieId {}")
def test_any_bytes_decode_or_raise_one_line_naming_the_node(decoder: object, data: bytes) -> None:
    where = "/ledgers/underreplication/x"
    assert callable(decoder)
    try:
        decoder(data, where)
    except UnderReplicationFormatError as exc:
        message = str(exc)
        assert message.startswith(f"{where}: not a"), message
        assert "\n" not in message
