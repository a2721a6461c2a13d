"""``bench compare --load java|both --channels N``: upstream's own Java client as the second
load, and connections per bookie for either load.

Why: the issue's targets are measured with both loads, so the Java load must report the same
figures by the same rules as the Python client (percentiles from the same code), say in one
line why it cannot run, and keep its results apart from the other load's; ``--channels``
must really open that many connections, each ledger on the one its id picks, as upstream's
client does. Where ``BOOKKEEPER_HOME`` names an installation a tiny live run goes against both
bookies; elsewhere that test skips, as the other live-upstream tests do.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.bench.compare import LOAD_CHOICES, command_of, plan_of
from bookiesim.bench.compare_run import SETTINGS
from bookiesim.bench.java_load import (
    SOURCE,
    compile_load,
    java_load,
    load_argv,
    parse_output,
)
from bookiesim.bench.load_client import LoadResult, build_frames, channel_of, run_load
from bookiesim.cli.main import build_parser, main
from bookiesim.cluster.processes import bookie_process
from bookiesim.upstream.installation import installation
from tests.missing import upstream_skip

SIZE = 1024


def _done_line(latencies_us: list[int], errors: int = 0, first_error: str | None = None) -> str:
    return json.dumps({
        "t": "done", "adds": len(latencies_us), "errors": errors, "seconds": 2.5,
        "first_error": first_error, "latency_us": latencies_us,
    })  # fmt: skip


# -- the options ----------------------------------------------------------------------------


def test_the_load_and_the_channels_are_in_the_plan_and_the_command_line() -> None:
    args = build_parser().parse_args(["bench", "compare", "--load", "both", "--channels", "4"])
    plan = plan_of(args)
    assert (plan.loads, plan.channels) == (("bookiesim", "java"), 4)
    assert command_of(args) == "bookiesim bench compare --load both --channels 4 --json"
    default = plan_of(build_parser().parse_args(["bench", "compare"]))
    assert (default.loads, default.channels) == (("bookiesim",), 1)
    assert LOAD_CHOICES["java"] == ("java",)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--load", "python"], "argument --load: invalid choice: 'python'"),
        (["--channels", "0"], "argument --channels: 0 is not positive"),
        (["--channels", "many"], "argument --channels: 'many' is not a number"),
    ],
)
def test_a_bad_load_or_channel_count_is_refused_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "compare", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_java_load_without_an_installation_refuses_to_start_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BOOKKEEPER_HOME", raising=False)
    code = main(["bench", "compare", "--load", "both", "--dir", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""  # no report
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("--load both needs upstream's client: no upstream BookKeeper")
    assert list(tmp_path.iterdir()) == []


# -- the Java load's output, as the Python client's figures ----------------------------------


@given(
    latencies=st.lists(st.integers(min_value=0, max_value=10_000_000), min_size=1, max_size=300),
    setup=st.floats(min_value=0, max_value=100, allow_nan=False),
)
def test_the_java_loads_latencies_become_the_python_clients_percentiles(
    latencies: list[int], setup: float
) -> None:
    stdout = "\n".join([json.dumps({"t": "ready", "setup_seconds": setup}), _done_line(latencies)])
    result = parse_output(stdout + "\n", SIZE)
    expected = LoadResult(len(latencies), 0, 2.5, SIZE, [us / 1e6 for us in latencies])
    assert result == {**expected.summary(), "setup_seconds": setup}
    assert result["p50_ms"] <= result["p99_ms"] <= result["p999_ms"]


def test_a_java_load_that_never_reported_its_adds_says_where_it_stopped() -> None:
    with pytest.raises(ValueError, match="ended before its ledgers existed"):
        parse_output("", SIZE)
    with pytest.raises(ValueError, match="ended after creating its ledgers"):
        parse_output('{"t":"ready","ledgers":10,"setup_seconds":0.1}\n', SIZE)


READY_LINE = '{"t":"ready","ledgers":10,"setup_seconds":0.4}\n'


def _stand_in(after_go: str, stderr: str = "", code: int = 0, *, ready: bool = True) -> list[str]:
    """A process that talks as the Java load does: its log on stderr, the ready line, then
    (after the go on stdin) ``after_go``, and exits with ``code``; not ``ready``: it exits
    with ``code`` before its ready line, as a Java load that could not create its ledgers
    does. The runner sees only a process and its output."""
    script = (
        "import sys\n"
        f"sys.stderr.write({stderr!r})\n"
        "print('SLF4J: a library talking on stdout', flush=True)\n"
    )
    if ready:
        script += (
            f"sys.stdout.write({READY_LINE!r}); sys.stdout.flush()\n"
            "sys.stdin.readline()\n"
            f"sys.stdout.write({after_go!r})\n"
        )
    return [sys.executable, "-c", script + f"sys.exit({code})\n"]


def test_the_java_load_runs_its_adds_only_after_the_go(tmp_path: Path) -> None:
    """Ready first (the caller then starts measuring the bookie), the timed adds after the
    go: a stand-in that records when it was told to go."""
    marker = tmp_path / "went"
    script = (
        "import sys, pathlib\n"
        f"sys.stdout.write({READY_LINE!r}); sys.stdout.flush()\n"
        "sys.stdin.readline()\n"
        f"pathlib.Path({str(marker)!r}).write_text('go')\n"
        f"sys.stdout.write({_done_line([1000, 2000]) + chr(10)!r})\n"
    )
    with java_load([sys.executable, "-c", script], SIZE) as go:
        assert not marker.exists()
        result = go()
    assert marker.read_text() == "go"
    assert (result["adds"], result["errors"], result["setup_seconds"]) == (2, 0, 0.4)
    assert "failed" not in result


def test_failed_adds_fail_the_run_naming_the_first_error() -> None:
    done = _done_line([900, 1200], errors=3, first_error="Bookie handle is not available")
    with java_load(_stand_in(done + "\n"), SIZE) as go:
        result = go()
    assert result["adds"] == 2
    assert result["failed"] == "3 adds failed (Bookie handle is not available)"


def test_a_crashed_java_load_fails_the_run_with_its_exception() -> None:
    stderr = (
        "07:01:02.003 INFO BookKeeper - connecting\n"
        'Exception in thread "main" java.lang.IllegalStateException: creating a ledger '
        "failed: Not enough non-faulty bookies available\n"
        "\tat CompareLoad.create(CompareLoad.java:90)\n"
    )
    with java_load(_stand_in("", stderr, 1, ready=False), SIZE) as go:
        result = go()
    assert result == {
        "failed": "the Java load ended before its ledgers existed, without reporting its adds: "
        'Exception in thread "main" java.lang.IllegalStateException: creating a ledger '
        "failed: Not enough non-faulty bookies available"
    }


def test_the_java_load_logs_to_stderr_and_finds_its_classes_first(tmp_path: Path) -> None:
    argv = load_argv(
        Path("/opt/bk"), tmp_path / "classes", tmp_path, "zk://127.0.0.1:2181/ledgers",
        ledgers=10, adds=3000, size=SIZE, rate=None, channels=4,
    )  # fmt: skip
    assert argv[argv.index("-cp") + 1] == f"{tmp_path / 'classes'}:/opt/bk/lib/*"
    assert argv[argv.index("-cp") + 2 :] == [
        "CompareLoad", "zk://127.0.0.1:2181/ledgers", "10", "3000", "1024", "2000", "0.000", "4",
    ]  # fmt: skip
    assert "appender.err.target = SYSTEM_ERR" in (tmp_path / "log4j2.properties").read_text()
    paced = load_argv(
        Path("/opt/bk"), tmp_path / "classes", tmp_path, "zk://z/ledgers",
        ledgers=10, adds=3000, size=SIZE, rate=1234.5, channels=1,
    )  # fmt: skip
    assert paced[-2:] == ["1234.500", "1"]


def test_the_java_load_source_ships_with_the_package() -> None:
    assert SOURCE.is_file()
    assert "public final class CompareLoad" in SOURCE.read_text()


# -- channels in the Python load -------------------------------------------------------------


def _connections_to(port: int) -> int:
    """ESTABLISHED TCP connections whose local end is ``port`` (a server's accepted ones)."""
    count = 0
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = row.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
            count += 1
    return count


@pytest.mark.parametrize("channels", [1, 3])
def test_the_python_load_opens_one_connection_per_channel(tmp_path: Path, channels: int) -> None:
    """Against a real bookie: ``channels`` connections while the load runs, each ledger's adds
    over the one its id picks, and every add answered."""
    ledgers, adds = 6, 1200
    frames = build_frames(ledgers, 1, adds, 100)
    route = [channel_of(1 + n % ledgers, channels) for n in range(adds)]
    assert sorted(set(route)) == list(range(channels))
    seen: list[int] = []

    async def run(port: int) -> LoadResult:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                while True:
                    seen.append(_connections_to(port))
                    await trio.sleep(0.05)

            nursery.start_soon(watch)
            # Paced to last about a second, so the watcher sees the connections open.
            result = await run_load("127.0.0.1", port, frames, 200, 1200.0, 100, channels, route)
            nursery.cancel_scope.cancel()
        return result

    with bookie_process(tmp_path / "b", *(f"{k}={v}" for k, v in SETTINGS.items())) as bookie:
        result = trio.run(run, bookie.bookie_port)
        bookie.stop(timeout=60)
    assert (result.adds, result.errors) == (adds, 0)
    assert max(seen) == channels


# -- live, against an installation ------------------------------------------------------------


@upstream_skip()
def test_the_java_load_compiles_against_the_installation(tmp_path: Path) -> None:
    if shutil.which("javac") is None:
        pytest.skip("no javac (a JDK) on PATH")
    home = installation()
    assert isinstance(home, Path)
    classes = compile_load(home, tmp_path)
    assert (classes / "CompareLoad.class").is_file()


def _plausible(run: dict[str, Any], *, paced: bool) -> None:
    assert "failed" not in run, run
    assert (run["load"], run["channels"], run["errors"]) == ("java", 2, 0)
    assert run["adds_per_second"] > 10
    assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["p999_ms"] < 60_000
    assert run["setup_seconds"] >= 0
    assert 0 < run["bookie_cpu_us_per_add"] < 1e6
    if not paced:
        assert run["adds"] == 2000
        assert run["files"] >= run["ledgers"]  # each ledger written has its index file


@pytest.mark.slow
@upstream_skip()
def test_live_java_load_against_both_bookies(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A tiny run of upstream's client against bookiesim's bookie and upstream's: both
    complete, with plausible figures, under the java load's name."""
    if shutil.which("javac") is None:
        pytest.skip("no javac (a JDK) on PATH")
    home = os.environ["BOOKKEEPER_HOME"]
    code = main([
        "bench", "compare", "--quick", "--adds", "2000", "--latency-seconds", "1",
        "--ledgers", "10,100", "--load", "java", "--channels", "2",
        "--bookkeeper-home", home, "--dir", str(tmp_path), "--json",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert (report["loads"], report["channels"]) == (["java"], 2)
    assert set(report["results"]) == {"java"}
    result = report["results"]["java"]
    assert result["failures"] == []
    (pair,) = result["runs"]
    assert set(pair) == {"peak_10", "peak_100", "fixed_rate"}
    for key, runs in pair.items():
        assert set(runs) == {"bookiesim", "upstream"}
        for run in runs.values():
            _plausible(run, paced=key == "fixed_rate")
        assert result["ratios"][key]["bookie_cpu_us_per_add"]["median"] > 0
    assert "upstream's Java client (2 channels per bookie)" in captured.err
    assert list(tmp_path.iterdir()) == []
