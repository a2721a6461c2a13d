"""The cookie codec and comparison rules, pure (tests/bookie checks them on real directories).

Why: a cookie that decodes differently from how it was written, or a comparison that lets a
changed directory through, lets a bookie serve with its data gone. Hypothesis round-trips any
fields, including bytes that need protobuf-java's escapes.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.metadata.cookies import (
    COOKIE_LAYOUT_VERSION,
    Cookie,
    CookieFormatError,
    Mismatch,
    decode_dir_paths,
    encode_dir_paths,
)

TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20)
DIR = st.text(st.characters(codec="utf-8", exclude_characters="\t\x00"), min_size=1)
DIRS = st.lists(DIR, min_size=1)


@given(
    bookie=TEXT,
    journals=st.lists(TEXT, min_size=1, max_size=3),
    ledgers=DIRS,
    index=st.none() | DIRS,
    instance=st.none() | TEXT,
)
def test_round_trip(
    bookie: str,
    journals: list[str],
    ledgers: list[str],
    index: list[str] | None,
    instance: str | None,
) -> None:
    cookie = Cookie.for_bookie(bookie, journals, ledgers, index_dirs=index, instance_id=instance)
    decoded = Cookie.decode(cookie.encode())
    assert decoded == cookie
    assert decoded.ledger_dir_paths() == ledgers
    assert cookie.mismatches(decoded) == []


@given(DIRS)
def test_dir_paths_round_trip(dirs: list[str]) -> None:
    assert decode_dir_paths(encode_dir_paths(dirs)) == dirs


def test_version_3_and_older_cookies() -> None:
    old = Cookie.decode(b"3\nhost:3181\n/j\n1\t/l\n")
    assert (old.bookie_id, old.journal_dirs, old.ledger_dirs, old.layout_version) == (
        "host:3181",
        "/j",
        "1\t/l",
        3,
    )
    ancient = Cookie.decode(b"2\nanything")
    expected = Cookie.for_bookie("h:1", ["/j"], ["/l"])
    assert expected.mismatches(ancient) == [
        Mismatch("layoutVersion", "2", str(COOKIE_LAYOUT_VERSION))
    ]
    assert str(expected.mismatches(ancient)[0]) == 'layoutVersion "2" (configured: "5")'


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"five\n", "is not a layout version"),
        (b"3\nonly-one-line", "3 lines after the version"),
        (b"5\nbookieHost: unquoted\n", "not a cookie"),
        (b'5\nbookieHost: "h:1"\n', "cookie without journalDir, ledgerDirs"),
    ],
)
def test_not_a_cookie(data: bytes, message: str) -> None:
    with pytest.raises(CookieFormatError, match=message) as info:
        Cookie.decode(data, "/dir/current/VERSION")
    assert "/dir/current/VERSION" in str(info.value)


def test_every_field_is_compared() -> None:
    expected = Cookie.for_bookie("h:1", ["/j"], ["/a", "/b"], instance_id="x")
    found = Cookie.for_bookie("h:2", ["/k"], ["/a"], index_dirs=["/i"], instance_id=None)
    fields = [m.field for m in expected.mismatches(found)]
    assert fields == ["bookieHost", "journalDir", "ledgerDirs", "indexDirs", "instanceId"]
    assert str(expected.mismatches(found)[-1]) == 'instanceId none (configured: "x")'


def test_storage_expansion_allows_more_configured_dirs_only() -> None:
    configured = Cookie.for_bookie("h:1", ["/j"], ["/a", "/b"])
    smaller = Cookie.for_bookie("h:1", ["/j"], ["/a"])
    assert [m.field for m in configured.mismatches(smaller)] == ["ledgerDirs", "indexDirs"]
    assert configured.mismatches(smaller, allow_expansion=True) == []
    assert smaller.mismatches(configured, allow_expansion=True) != []
