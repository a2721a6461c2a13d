"""How the live checks judge a bookie's stop after SIGTERM (:mod:`tests.interop.upstream_live`),
without an upstream installation.

Why: against another build of upstream 4.17.4 the hand-over checks failed although the data
was all there, because the JVM's log ended before its shutdown hook's last line. The stop is
judged by the exit code (bookiesim 0, upstream's JVM 143 once its shutdown hooks ran); these
hold that, with stand-in processes that handle SIGTERM as each kind does.
"""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.interop.upstream_live import JVM_SIGTERM_EXIT, Bookie, stop_problem, wait_for

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path


@pytest.mark.parametrize(("kind", "code"), [("bookiesim", 0), ("upstream", JVM_SIGTERM_EXIT)])
def test_the_expected_exit_code_is_a_clean_stop(kind: str, code: int) -> None:
    assert stop_problem(kind, code, 60) is None


@pytest.mark.parametrize(
    ("kind", "code", "problem"),
    [
        ("upstream", 0, "the upstream bookie exited with 0 after SIGTERM, not 143"),
        ("upstream", 1, "the upstream bookie exited with 1 after SIGTERM, not 143"),
        (
            "bookiesim",
            JVM_SIGTERM_EXIT,
            "the bookiesim bookie exited with 143 after SIGTERM, not 0",
        ),
        # Popen's code for a death by the signal itself: no shutdown hook ran.
        ("upstream", -15, "the upstream bookie was killed by SIGTERM after SIGTERM, not 143"),
        ("bookiesim", -9, "the bookiesim bookie was killed by SIGKILL after SIGTERM, not 0"),
        ("upstream", -200, "the upstream bookie was killed by signal 200 after SIGTERM, not 143"),
        ("upstream", None, "the upstream bookie had not exited 60 s after SIGTERM"),
    ],
)
def test_any_other_end_is_named(kind: str, code: int | None, problem: str) -> None:
    assert stop_problem(kind, code, 60) == problem


STAND_IN = """
import signal, sys, time
def stop(signum, frame):
    print("shutting down", flush=True)  # and never the hook's "successfully. Exiting."
    sys.exit(int(sys.argv[1]))
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while True:
    time.sleep(0.1)
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[Callable[[str, str], Bookie]]:
    """``start(kind, how)``: a process that, on SIGTERM, exits with the code ``how`` (or
    ignores it: ``"ignore"``), as a :class:`Bookie` of ``kind``; killed at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(kind: str, how: str) -> Bookie:
        log = tmp_path / f"{kind}-{how}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", STAND_IN, how], stdout=out, stderr=subprocess.STDOUT
            )
        started.append(proc)
        wait_for(lambda: "ready" in log.read_text(), "the stand-in", proc, log, timeout=30)
        return Bookie(kind, 0, tmp_path, proc, log)

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_upstream_bookie_exiting_143_stopped_cleanly_whatever_its_log_says(
    stand_in: Callable[[str, str], Bookie],
) -> None:
    bookie = stand_in("upstream", str(JVM_SIGTERM_EXIT))

    bookie.stop_cleanly()

    assert bookie.proc.returncode == JVM_SIGTERM_EXIT
    assert "successfully. Exiting." not in bookie.log.read_text()


def test_a_bad_exit_fails_with_the_code_and_the_log(
    stand_in: Callable[[str, str], Bookie],
) -> None:
    bookie = stand_in("bookiesim", "3")

    with pytest.raises(AssertionError) as failure:
        bookie.stop_cleanly()

    assert "the bookiesim bookie exited with 3 after SIGTERM, not 0" in str(failure.value)
    assert "shutting down" in str(failure.value)  # the end of its log


def test_a_bookie_that_does_not_exit_fails_in_time(
    stand_in: Callable[[str, str], Bookie],
) -> None:
    bookie = stand_in("upstream", "ignore")

    with pytest.raises(AssertionError, match="had not exited 1 s after SIGTERM"):
        bookie.stop_cleanly(timeout=1)
