"""The control protocol's lines: what the harness sends is what the file system parses, and a
wrong line is one answer naming what was wrong."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.chaos.lazyfs.control import (
    Crash,
    FailReads,
    HealReads,
    Hold,
    Status,
    crash_line,
    fail_reads_line,
    heal_reads_line,
    parse_command,
)

tears = st.none() | st.integers(0, 1 << 20) | st.floats(0.0, 1.0)
onlys = st.none() | st.text("abcdefghijklmnopqrstuvwxyz/._-0123456789", min_size=1, max_size=20)


@given(tears, onlys)
def test_a_crash_line_parses_back(tear: int | float | None, only: str | None) -> None:
    if tear is None:
        only = None
    assert parse_command(crash_line(tear, only)) == Crash(tear, only)


@given(st.text("abcdefghijklmnopqrstuvwxyz/._-0123456789", min_size=1, max_size=20))
def test_read_fault_lines_parse_back(only: str) -> None:
    assert parse_command(fail_reads_line(only)) == FailReads(only)
    assert parse_command(heal_reads_line(only)) == HealReads(only)
    assert parse_command(heal_reads_line()) == HealReads(None)


def test_status_and_hold_parse() -> None:
    assert parse_command("status\n") == Status()
    assert parse_command("hold only=/journal/") == Hold("/journal/")


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("crash tear=-1", "out of range"),
        ("crash tear=1.5", "out of range"),
        ("crash tear=half", "neither bytes nor a fraction"),
        ("crash only=/journal/", "needs a tear"),
        ("crash tear=1 color=red", "unknown command"),
        ("reboot", "unknown command"),
        ("hold only=", "needs the text"),
        ("hold", "unknown command"),
        ("fail-reads", "unknown command"),
        ("fail-reads only=", "needs the text"),
        ("heal-reads only=", "needs the text"),
        ("fail-reads only=a b", "unknown command"),
        ("", "unknown command"),
    ],
)
def test_a_wrong_line_is_refused_naming_what(line: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_command(line)


def test_the_harness_cannot_ask_for_a_tear_filter_without_a_tear() -> None:
    with pytest.raises(ValueError, match="needs a tear"):
        crash_line(None, "/journal/")
    with pytest.raises(TypeError, match="bool"):
        crash_line(True)
    with pytest.raises(ValueError, match="without spaces"):
        fail_reads_line("two words")
