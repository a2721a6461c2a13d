"""The text-format printer shared by cookies and the auto-recovery records."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.metadata.text_format import print_text, quote
from bookiesim.proto.DataFormats_pb2 import (
    BookieServiceInfoFormat,
    CookieFormat,
    UnderreplicatedLedgerFormat,
)


@given(st.text())
def test_any_quoted_string_parses_back(value: str) -> None:
    printed = print_text(CookieFormat(bookieHost=value, journalDir="j", ledgerDirs="l"))
    assert printed.isascii()
    parsed = text_format.Parse(printed.decode("ascii"), CookieFormat())
    assert parsed.bookieHost == value


def test_fields_in_number_order_repeated_ones_each_on_a_line() -> None:
    mark = UnderreplicatedLedgerFormat(replica=["b:1", "a:2"], ctime=7)
    assert print_text(mark) == b'replica: "b:1"\nreplica: "a:2"\nctime: 7\n'
    cookie = CookieFormat(ledgerDirs="l", bookieHost="h", journalDir="j")  # set out of order
    assert print_text(cookie) == b'bookieHost: "h"\njournalDir: "j"\nledgerDirs: "l"\n'
    assert quote("") == '""'


def test_a_field_kind_we_never_print_is_refused() -> None:
    info = BookieServiceInfoFormat(endpoints=[BookieServiceInfoFormat.Endpoint(id="bookie")])
    with pytest.raises(TypeError, match="no text printer"):
        print_text(info)
