"""``cluster.json`` and the settings ``cluster up`` records: what a later ``up`` reads back is
what was written, the previous version's file opens, and ``--set`` on an existing cluster
replaces exactly the keys it names."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.cluster.control import merged_settings
from bookiesim.cluster.processes import ClusterError
from bookiesim.cluster.state import FORMAT, find_bookie, read_state, write_state
from tests.mounts import mounted_tmpfs

if TYPE_CHECKING:
    from pathlib import Path

keys = st.sampled_from(["flushInterval", "journalPreAllocSizeMB", "autoRecoveryDaemonEnabled"])
settings = st.lists(st.tuples(keys, st.integers(0, 9)).map(lambda kv: f"{kv[0]}={kv[1]}"))


@given(old=settings, new=settings)
def test_set_on_an_existing_cluster_replaces_the_keys_it_names(
    old: list[str], new: list[str]
) -> None:
    merged = merged_settings(old, new)
    as_dict = dict(s.split("=", 1) for s in [*old, *new])  # later ones win
    assert dict(s.split("=", 1) for s in merged) == as_dict
    assert len(merged) == len(as_dict)  # each key once


def test_the_previous_versions_file_opens_and_round_trips(tmp_path: Path) -> None:
    previous = {
        "metadata": f"sqlite:///{tmp_path}/metadata.db",
        "settings": ["autoRecoveryDaemonEnabled=true"],
        "bookies": [
            {
                "name": "bookie-1",
                "pid": 4242,
                "bookieId": "127.0.0.1:35253",
                "bookiePort": 35253,
                "httpServerPort": 41000,
                "dir": str(tmp_path / "bookie-1"),
                "log": str(tmp_path / "bookie-1" / "bookie.log"),
            }
        ],
        "scrapeConfig": str(tmp_path / "prometheus.yml"),
        "prometheus": None,
    }
    (tmp_path / "cluster.json").write_text(json.dumps(previous))
    state = read_state(tmp_path)
    assert state["format"] == FORMAT
    (bookie,) = state["bookies"]
    assert (bookie["bookieId"], bookie["expected"]) == ("127.0.0.1:35253", "running")
    write_state(tmp_path, state)
    assert read_state(tmp_path) == state
    assert '"127.0.0.1:41000"' in (tmp_path / "prometheus.yml").read_text()
    # Named by name, index or id; anything else says which there are.
    assert find_bookie(state, "bookie-1") is find_bookie(state, "1") is bookie
    assert find_bookie(state, "127.0.0.1:35253") is bookie
    with pytest.raises(ClusterError, match=r"no bookie '2' .*bookie-1 \(127.0.0.1:35253\)"):
        find_bookie(state, "2")


def test_a_file_that_is_no_cluster_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text('{"bookies": []}')
    with pytest.raises(ClusterError) as caught:
        read_state(tmp_path)
    assert "\n" not in str(caught.value)
    assert "not a cluster description bookiesim can read" in str(caught.value)


def test_a_full_disk_leaves_the_previous_state_whole_and_says_so(tmp_path: Path) -> None:
    """``cluster down`` on a disk a user filled: the state cannot be written, the files of
    the last write stay as they were, no temporary file is left, and the error is a line."""
    with mounted_tmpfs(tmp_path / "small", 1 << 20) as root:
        previous: dict[str, object] = {
            "metadata": f"sqlite:///{root}/metadata.db",
            "settings": [],
            "bookies": [],
            "prometheus": None,
        }
        (root / "cluster.json").write_text(json.dumps(previous))
        state = read_state(root)
        write_state(root, state)
        before = {p.name: p.read_bytes() for p in root.iterdir()}
        with (root / "filler").open("wb", buffering=0) as f, contextlib.suppress(OSError):
            while True:
                f.write(bytes(4096))
        state["settings"] = ["x=" + "y" * 8192]  # more than the disk has left
        with pytest.raises(ClusterError, match=r"cannot write .*: No space left on device"):
            write_state(root, state)
        (root / "filler").unlink()
        assert {p.name: p.read_bytes() for p in root.iterdir()} == before
