"""Upstream's bookies and Java client as chaos targets: which node runs what, the URI and
``bk_server.conf`` they get, and the Java writer's lines turned into a history the checker
reads like any other (all without an installation); compiling and running the writer
against upstream's jars where ``BOOKKEEPER_HOME`` names one (skips elsewhere, CI included)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.chaos.checker import check_history
from bookiesim.chaos.history import Recorder, parse_history
from bookiesim.chaos.upstream.bookies import upstream_conf
from bookiesim.chaos.upstream.cluster import CLUSTERS, bookie_kinds, upstream_metadata_uri
from bookiesim.chaos.upstream.java_writer import (
    GRACE,
    SOURCE,
    Relay,
    compile_writer,
    java_writer,
    parse_line,
    writer_argv,
)
from bookiesim.chaos.workloads import Workloads, WriterSpec
from bookiesim.upstream.installation import installation
from tests.chaos.test_netns import need_network
from tests.missing import need_zookeeper, upstream_skip

NODES = st.lists(st.sampled_from([f"b{i}" for i in range(1, 8)]), min_size=1, unique=True)


@given(NODES, st.sampled_from(sorted(CLUSTERS)))
def test_every_node_runs_one_program_and_a_mixed_cluster_runs_both(
    nodes: list[str], cluster: str
) -> None:
    kinds = bookie_kinds(cluster, nodes)
    assert list(kinds) == nodes
    if cluster == "mixed":
        assert kinds[nodes[0]] == "upstream"
        assert set(kinds.values()) == (
            {"upstream", "bookiesim"} if len(nodes) > 1 else {"upstream"}
        )
    else:
        assert set(kinds.values()) == {cluster}


def test_an_unknown_cluster_is_one_line() -> None:
    with pytest.raises(
        ValueError, match="unknown cluster 'jvm': choose from bookiesim, upstream, mixed"
    ):
        bookie_kinds("jvm", ["b1"])


def test_upstream_reads_an_ensemble_with_semicolons() -> None:
    uri = "zk://10.123.0.6:2181,10.123.0.7:2181,10.123.0.8:2181/ledgers"
    assert upstream_metadata_uri(uri) == (
        "zk+hierarchical://10.123.0.6:2181;10.123.0.7:2181;10.123.0.8:2181/ledgers"
    )
    assert upstream_metadata_uri("zk+hierarchical://h:2181/l") == "zk+hierarchical://h:2181/l"
    with pytest.raises(ValueError, match="need ZooKeeper as the metadata store, not sqlite"):
        upstream_metadata_uri("sqlite:////tmp/x.db")


def test_the_conf_registers_the_node_address_and_leaves_recovery_to_the_daemons() -> None:
    conf = upstream_conf(
        address="10.123.0.1", port=3181, metadata_uri="zk://10.123.0.6:2181/ledgers",
        journal=Path("/d/journal"), ledgers=Path("/d/ledgers"),
        settings={"diskUsageThreshold": "0.90", "flushInterval": 500},
    )  # fmt: skip
    assert conf["advertisedAddress"] == "10.123.0.1"
    assert conf["bookiePort"] == 3181
    assert conf["useHostNameAsBookieID"] == "false"
    assert conf["metadataServiceUri"] == "zk+hierarchical://10.123.0.6:2181/ledgers"
    assert conf["autoRecoveryDaemonEnabled"] == "false"
    assert conf["entryLogPerLedgerEnabled"] == "true"
    assert conf["diskUsageThreshold"] == "0.90"
    assert conf["flushInterval"] == 500  # the run's settings win


def _line(**fields: Any) -> str:
    return json.dumps(fields)


def test_the_java_writers_lines_become_a_history_the_checker_reads() -> None:
    records: list[dict[str, Any]] = []
    rec = Recorder(records.append, replay="bookiesim chaos replay h.jsonl")
    created: list[int] = []
    done: list[int] = []
    relay = Relay(rec, "java-writer-1", "c1", "java writer 3-2-2-v3", created.append, done.append)
    p0, p1, p2 = (f"java-writer-1 7 {i} ".encode().hex() for i in range(3))
    for text in [
        _line(t="invoke", id=1, kind="create"),
        _line(t="ok", id=1, ledger=7),
        _line(t="invoke", id=2, kind="add", ledger=7, payload=p0),
        _line(t="ok", id=2, entry=0),
        _line(t="invoke", id=3, kind="add", ledger=7, payload=p1),
        _line(t="ok", id=3, entry=1),
        _line(t="invoke", id=4, kind="add", ledger=7, payload=p2),
    ]:
        relay.feed(parse_line(text))
    relay.finish("the Java writer ended (exit -9) without an answer")
    assert created == [7]
    assert done == [7]
    # The final phase's read, as the harness records it, holds the writer to its acks.
    read = rec.invoke("read", process="final", node="c1", ledger=7, entry=0, last=1)
    rec.ok_read(read, {0: bytes.fromhex(p0), 1: bytes.fromhex(p1)})
    history = parse_history("".join(json.dumps(r) + "\n" for r in records))
    adds = [op for op in history.ops if op.kind == "add"]
    assert [op.outcome for op in adds] == ["ok", "ok", "unknown"]
    assert check_history(history).violations == []
    # The same writer's acknowledged entry read back with other bytes: caught.
    records.clear()
    rec = Recorder(records.append)
    relay = Relay(rec, "java-writer-1", "c1", "w", created.append, done.append)
    relay.feed(parse_line(_line(t="invoke", id=1, kind="add", ledger=7, payload=p0)))
    relay.feed(parse_line(_line(t="ok", id=1, entry=0)))
    read = rec.invoke("read", process="final", node="c1", ledger=7, entry=0, last=0)
    rec.ok_read(read, {0: b"other bytes"})
    history = parse_history("".join(json.dumps(r) + "\n" for r in records))
    assert check_history(history).violations


@pytest.mark.parametrize(
    "text",
    ["", "INFO client started", '{"t": "done", "id": 1}', '{"t": "ok"}', '{"t": "ok", "id": "1"}'],
)
def test_anything_but_a_writer_line_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a line of the Java writer"):
        parse_line(text)


def test_the_writer_logs_to_stderr_and_finds_its_classes_first(tmp_path: Path) -> None:
    argv = writer_argv(
        Path("/opt/bk"), tmp_path / "classes", tmp_path, "zk+hierarchical://z:2181/ledgers",
        WriterSpec(3, 2, 2), 60.0, 7, "java-writer-1",
    )  # fmt: skip
    assert argv[argv.index("-cp") + 1] == f"{tmp_path / 'classes'}:/opt/bk/lib/*"
    assert argv[-8:] == [
        "zk+hierarchical://z:2181/ledgers", "3", "2", "2", "60.000", "200", "7", "java-writer-1",
    ]  # fmt: skip
    assert "appender.err.target = SYSTEM_ERR" in (tmp_path / "log4j2.properties").read_text()


def test_the_writer_source_ships_with_the_package() -> None:
    assert SOURCE.is_file()
    assert "public final class ChaosWriter" in SOURCE.read_text()


@upstream_skip()
def test_the_writer_compiles_against_the_installation(tmp_path: Path) -> None:
    if shutil.which("javac") is None:
        pytest.skip("no javac (a JDK) on PATH")
    home = installation()
    assert isinstance(home, Path)
    classes = compile_writer(home, tmp_path)
    assert (classes / "ChaosWriter.class").is_file()


def test_a_missing_installation_api_is_one_line(tmp_path: Path) -> None:
    if shutil.which("javac") is None:
        pytest.skip("no javac (a JDK) on PATH")
    (tmp_path / "lib").mkdir()
    with pytest.raises(RuntimeError, match=r"ChaosWriter\.java does not compile against"):
        compile_writer(tmp_path, tmp_path / "work")


async def test_the_runner_relays_a_writers_output_and_keeps_stray_lines(tmp_path: Path) -> None:
    """A stand-in process printing what the Java writer prints (and a library's stray line):
    its lines reach the history, the stray one its log, its ledger the final phase."""
    payload = b"java-writer-1 7 0 ".hex()
    lines = [
        _line(t="invoke", id=1, kind="create"),
        _line(t="ok", id=1, ledger=7),
        "SLF4J: a library talking on stdout",
        _line(t="invoke", id=2, kind="add", ledger=7, payload=payload),
        _line(t="ok", id=2, entry=0),
        _line(t="invoke", id=3, kind="add", ledger=7, payload=payload),
    ]
    script = "import sys, time\n" + "".join(f"print({text!r}, flush=True)\n" for text in lines)
    script += "time.sleep(60)\n"  # never answers its last add: killed at the grace's end
    records: list[dict[str, Any]] = []
    rec = Recorder(records.append)
    work = Workloads(rec, "c1", {}, random.Random(1), trio.current_time() - GRACE + 1.5)
    log = tmp_path / "java-writer-1.log"
    await java_writer(work, [sys.executable, "-c", script], WriterSpec(3, 2, 2), 1, log)
    outcomes = [r["type"] for r in records if r["type"] != "header"]
    assert outcomes == ["invoke", "ok", "invoke", "ok", "invoke", "unknown"]
    assert records[-1]["error"].startswith("the Java writer ended (exit -9)")
    assert work.ledgers == {7}
    assert work.writing == {}
    assert log.with_suffix(".stdout").read_text() == "SLF4J: a library talking on stdout\n"


@upstream_skip()
def test_a_mixed_cluster_and_upstreams_own_client_take_faults_with_no_violation(
    tmp_path: Path,
) -> None:
    """Live, with an installation: upstream's bookies in b1 and b3, bookiesim's in b2 and b4,
    upstream's Java client writing beside bookiesim's writers, a crash and a pause."""
    need_network()
    need_zookeeper()
    home = installation()
    assert isinstance(home, Path)
    out = tmp_path / "run"
    argv = [
        sys.executable, "-m", "bookiesim", "chaos", "run", "--cluster", "mixed",
        "--bookkeeper-home", str(home), "--metadata", "zk", "--families", "crash,pause",
        "--duration", "30", "--java-writers", "3/2/2", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["violations"] == {}
    assert summary["addsLost"] == 0
    assert summary["meta"]["cluster"] == "mixed"
    history = parse_history((out / "history.jsonl").read_text())
    java = [op for op in history.ops if op.process == "java-writer-1" and op.kind == "add"]
    assert sum(op.outcome == "ok" for op in java) > 100
    conf = (out / "bookies" / "b1" / "bk_server.conf").read_text()
    assert "advertisedAddress=10.123.0.1\n" in conf  # b1 ran upstream's bookie
