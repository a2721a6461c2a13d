"""The one process spawner: a test bookie that starts, restarts on its data, stops cleanly,
and one that cannot start says why instead of hanging or losing its log."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import pytest

from bookiesim.bookie import exit_codes
from bookiesim.cluster.processes import ClusterError, bookie_process, pid_alive

if TYPE_CHECKING:
    from pathlib import Path


def test_a_bookie_process_restarts_on_its_data_and_stops_cleanly(tmp_path: Path) -> None:
    with bookie_process(tmp_path) as bookie:
        assert bookie.bookie_port > 0
        assert bookie.http_port > 0
        assert pid_alive(bookie.proc.pid)
        bookie.kill9()
    assert not pid_alive(bookie.proc.pid)
    assert (tmp_path / "ledgers").is_dir()  # the root is kept, so the next run finds its data
    with bookie_process(tmp_path) as bookie:
        assert bookie.stop() == 0
        assert bookie.exit_code == 0


def test_a_bookie_that_cannot_start_is_reported_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as caught, bookie_process(tmp_path, "noSuchKey=1"):
        pytest.fail("a bookie with an unknown key must not get ready")
    message = str(caught.value)
    assert f"code {exit_codes.BAD_CONFIGURATION}" in message
    assert "unknown key 'noSuchKey'" in message  # the bookie's own words, from its log
    assert str(tmp_path / "bookie.log") in message


def test_a_child_without_an_admin_api_may_announce_only_its_port(tmp_path: Path) -> None:
    announce = json.dumps({"bookiePort": 4181})
    program = (
        sys.executable,
        "-c",
        f"import sys, time; print({announce!r}, flush=True); time.sleep(60)",
    )
    with bookie_process(tmp_path, program=program) as child:
        assert (child.bookie_port, child.http_port) == (4181, 0)
    assert child.proc.poll() is not None  # killed on leaving the block


def test_a_ready_line_that_is_not_json_names_the_child(tmp_path: Path) -> None:
    program = (sys.executable, "-c", "print('hello', flush=True)")
    with (
        pytest.raises(ClusterError, match="unexpected ready line b'hello'"),
        bookie_process(tmp_path, program=program),
    ):
        pytest.fail("a child whose ready line is not JSON must not get ready")
