"""Which bookie each input is, and which logs are empty rather than bad.

Why: ``bookiesim pipeline`` is pointed at real bookie directories, in whatever layout their
owner keeps (``A/bookie-1`` as a ledger dir, ``/data/bk1/ledgers``, copies of one bookie
side by side). Two inputs named alike once had their replicas merged into one bookie and
every per-bookie count was wrong without a word; and the 0-byte log every upstream ledger
dir holds stopped the inventory as a "bad file".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bookiesim.pipeline import bookies
from bookiesim.pipeline.inputs import BookieNameError, InputError, bookie_of, find_logs
from tests.pipeline.logs import body, write_log


def cookie(ledger_dir: Path, bookie_id: str, *dirs: Path) -> None:
    """A cookie as upstream writes it (text format, version 5)."""
    listed = "\\t".join([str(len(dirs)), *(str(d) for d in dirs)])
    (ledger_dir / "current" / "VERSION").write_text(
        f'5\nbookieHost: "{bookie_id}"\njournalDir: "/j"\nledgerDirs: "{listed}"\n'
        'instanceId: "6d879652-9bc4-4e3a-a1cc-d087cb299cd4"\n'
    )


def test_path_names() -> None:
    assert bookie_of(Path("/c/bookie-2/ledgers/current/1a.log")) == "bookie-2"
    assert bookie_of(Path("/var/bk/ledgers/current/0.log")) == "bk"
    assert bookie_of(Path("/data/bk1/ledgers2/current/0.log")) == "bk1"
    assert bookie_of(Path("/A/bookie-1/current/0.log")) == "bookie-1"
    assert bookie_of(Path("/copies/node7/3.log")) == "node7"


def test_ledger_dirs_named_after_their_bookies_stay_apart(tmp_path: Path) -> None:
    for name in ("bookie-1", "bookie-2"):
        write_log(tmp_path / "A" / name, 1, [body(5, 0)])
    found = find_logs([str(tmp_path / "A" / "bookie-1"), str(tmp_path / "A" / "bookie-2")])
    assert sorted(f.bookie for f in found.files) == ["bookie-1", "bookie-2"]
    assert found.notes == []
    # The same through a current/ dir, a single file, or the parent dir.
    found = find_logs([str(tmp_path / "A" / "bookie-1" / "current"), str(tmp_path / "A")])
    assert sorted(f.bookie for f in found.files) == ["bookie-1", "bookie-2"]


def test_the_cookie_names_the_bookie(tmp_path: Path) -> None:
    ledgers = tmp_path / "bk1" / "ledgers"
    write_log(ledgers, 1, [body(5, 0)])
    cookie(ledgers, "127.0.0.1:3181", ledgers)
    assert [f.bookie for f in find_logs([str(tmp_path)]).files] == ["127.0.0.1:3181"]
    assert find_logs([str(tmp_path)], bookie="mine").files[0].bookie == "mine"


def test_one_bookies_ledger_dirs_are_one_bookie(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "disk1" / "ledgers", tmp_path / "disk2" / "ledgers"
    for i, d in enumerate((d1, d2)):
        write_log(d, i, [body(5, i)])
        cookie(d, "10.0.0.1:3181", d1, d2)
    found = find_logs([str(d1), str(d2)])
    assert [f.bookie for f in found.files] == ["10.0.0.1:3181"] * 2
    assert found.notes == []


def test_copies_of_one_bookie_are_kept_apart_with_a_note(tmp_path: Path) -> None:
    for name in ("bookie-1", "bookie-2"):
        ledgers = tmp_path / "X" / name / "ledgers"
        write_log(ledgers, 1, [body(5, 0)])
        cookie(ledgers, "127.0.0.1:35181", Path("/tmp/vec/bd/ledgers"))
    found = find_logs([str(tmp_path / "X")])
    assert sorted(f.bookie for f in found.files) == ["bookie-1", "bookie-2"]
    (note,) = found.notes
    assert "127.0.0.1:35181" in note
    assert str(tmp_path / "X" / "bookie-1" / "ledgers") in note


def test_same_path_names_under_two_roots_get_their_roots(tmp_path: Path) -> None:
    for root in ("X", "Y"):
        write_log(tmp_path / root / "bk" / "ledgers", 1, [body(5, 0)])
    found = find_logs([str(tmp_path / "X"), str(tmp_path / "Y")])
    assert sorted(f.bookie for f in found.files) == ["X/bk", "Y/bk"]
    assert len(found.notes) == 1


def test_a_rename_that_collides_is_refused_naming_both(tmp_path: Path) -> None:
    # Two copies of a cookie's bookie are renamed by their paths, and one of those names is
    # already a third dir's.
    for name in ("bookie-1", "bookie-2"):
        ledgers = tmp_path / "X" / name / "ledgers"
        write_log(ledgers, 1, [body(5, 0)])
        cookie(ledgers, "h:1", Path("/elsewhere"))
    write_log(tmp_path / "Q" / "bookie-1", 1, [body(5, 0)])
    with pytest.raises(BookieNameError, match="would both be bookie bookie-1") as info:
        find_logs([str(tmp_path / "X"), str(tmp_path / "Q")])
    assert str(tmp_path / "Q" / "bookie-1") in str(info.value)
    assert "\n" not in str(info.value)


def test_a_file_reached_twice_is_read_once(tmp_path: Path) -> None:
    log = write_log(tmp_path / "b1" / "ledgers", 1, [body(5, 0)])
    found = find_logs([str(tmp_path), str(log), str(log.parent)])
    assert [f.path for f in found.files] == [str(log)]


@pytest.mark.parametrize("content", [b"", bytes(100), b"BKLO\x00\x00"])
def test_a_log_never_written_is_empty_not_bad(tmp_path: Path, content: bytes) -> None:
    good = write_log(tmp_path / "b1" / "ledgers", 1, [body(5, 0)])
    (good.parent / "3.log").write_bytes(content)
    found = find_logs([str(tmp_path)])
    assert [f.path for f in found.files] == [str(good)]
    assert [(f.log_id, f.size, f.bookie) for f in found.empty] == [(3, len(content), "b1")]
    assert found.skipped == []


def test_a_short_log_of_junk_is_still_bad(tmp_path: Path) -> None:
    good = write_log(tmp_path / "b1" / "ledgers", 1, [body(5, 0)])
    (good.parent / "3.log").write_bytes(b"junk")
    with pytest.raises(InputError, match=r"3\.log"):
        find_logs([str(tmp_path)])


def test_the_cookie_reader_agrees_with_the_cookie_codec(tmp_path: Path) -> None:
    """The pipeline reads cookies with a few lines of its own (it may not import the
    metadata package); they must read what the codec writes, escapes and all."""
    from bookiesim.metadata.cookies import Cookie

    dirs = [str(tmp_path / "d1" / "ledgers"), str(tmp_path / 'dé "2"' / "ledgers")]
    for d in dirs:
        (Path(d) / "current").mkdir(parents=True)
        encoded = Cookie.for_bookie("bk-7.example:3181", ["/j"], dirs, instance_id="i").encode()
        (Path(d) / "current" / "VERSION").write_bytes(encoded)
    cookie = bookies.read_cookie(Path(dirs[1]) / "current")
    assert cookie is not None
    assert (cookie.bookie_id, cookie.ledger_dirs) == ("bk-7.example:3181", tuple(dirs))
    # Upstream's own, recorded.
    from tests.interop.vectors import disk_dir

    (tmp_path / "up").mkdir()
    shutil.copy(disk_dir() / "VERSION.ledgers.bin", tmp_path / "up" / "VERSION")
    upstream = bookies.Cookie("127.0.0.1:35181", ("/tmp/vec/bd/ledgers",))
    assert bookies.read_cookie(tmp_path / "up") == upstream
