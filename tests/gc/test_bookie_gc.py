"""GC in a running bookie: the admin endpoints, ``bookiesim shell gc``, metrics, and
upstream's testCompactionPersistence (a restarted bookie reads every live entry from the
compacted logs)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client.parser import text_string_to_metric_families

from bookiesim.cli.main import main
from bookiesim.cluster.testing import BookieTestClient, bookie_client, bookie_config, running_bookie
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

from .helpers import FakeLedgers

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

PAYLOAD = 1000
SHARE = {1: 2, 2: 28, 3: 70}


def http(port: int, method: str, path: str, body: object = None) -> tuple[int, Any]:
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def call(port: int, method: str, path: str, body: object = None) -> tuple[int, Any]:
    return await trio.to_thread.run_sync(http, port, method, path, body)


def payload(ledger_id: int, entry_id: int) -> bytes:
    return bytes([ledger_id]) * (PAYLOAD - 8) + entry_id.to_bytes(8, "big")


async def write_rounds(client: BookieTestClient, rounds: int) -> dict[int, int]:
    """Interleaved rounds of 2/28/70 entries (CompactionTest); returns entries per ledger."""
    counts = dict.fromkeys(SHARE, 0)
    for _ in range(rounds):
        for ledger_id, n in SHARE.items():
            for _ in range(n):
                entry_id = counts[ledger_id]
                response = await client.add(ledger_id, entry_id, payload(ledger_id, entry_id))
                assert response.status == pb.EOK
                counts[ledger_id] += 1
    return counts


def cfg(root: Path) -> Any:
    # One interleaved log per round, as upstream's CompactionTest; GC only when forced here.
    return bookie_config(
        root,
        entry_log_per_ledger_enabled=False,
        log_size_limit=100 * (PAYLOAD + 100),
        minor_compaction_threshold=0.1,
        major_compaction_threshold=0.5,
    )


async def test_forced_gc_over_http_and_compaction_persistence(tmp_path: Path) -> None:
    ledgers = FakeLedgers(SHARE)
    async with running_bookie(cfg(tmp_path)) as service:
        assert service.address is not None
        port = service.address.http_port
        service.bookie.gc.ledger_source = ledgers
        async with bookie_client(service) as client:
            counts = await write_rounds(client, 3)
        service.bookie.storage.entry_logger.create_new_log(1)  # roll the last round's log
        await service.bookie.checkpoint()

        assert await call(port, "GET", "/api/v1/bookie/gc") == (
            200,
            {"is_in_force_gc": "false", "gcRunning": False},
        )
        ledgers.ids -= {2, 3}
        status, answer = await call(port, "PUT", "/api/v1/bookie/gc?wait=true", {})
        assert status == 200
        assert answer["triggered"]
        report = answer["report"]
        assert report["ledgersDeleted"] == [2, 3]
        assert report["compaction"] == "major"
        # Every log held ledger 1 (2 %) or only ledgers 2 and 3: compacted, or deleted whole.
        assert report["logsCompacted"]
        record = PAYLOAD + 32 + 4 + 4  # ids, LAC, length, CRC32C digest; the size field
        assert report["bytesCopied"] == counts[1] * record

        status, details = await call(port, "GET", "/api/v1/bookie/gc_details")
        assert status == 200
        assert details[0]["majorCompactionCounter"] == 1
        assert all(log["ledgers"] == [1] for log in details[0]["entryLogs"])

        body, _ = service.metrics.render()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
        }
        assert samples["bookie_gc_runs_total", ()] == 1
        assert samples["bookie_gc_deleted_ledgers_total", ()] == 2
        assert samples["bookie_gc_compacted_bytes_total", ()] == report["bytesCopied"]
        assert samples["bookie_gc_compactions_total", (("kind", "major"),)] == 1
        reclaimed = samples["bookie_gc_reclaimed_bytes_total", (("reason", "compacted"),)]
        assert reclaimed == report["reclaimedByCompaction"] > 0

    # testCompactionPersistence: a new bookie on the same dirs reads ledger 1 in full.
    async with running_bookie(cfg(tmp_path)) as service, bookie_client(service) as client:
        for entry_id in range(counts[1]):
            response = await client.read(1, entry_id)
            assert response.status == pb.EOK
            assert response.readResponse.body.endswith(payload(1, entry_id))
        assert (await client.read(2, 0)).status == pb.ENOLEDGER


async def test_gc_endpoints_reject_bad_input(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as service:
        assert service.address is not None
        port = service.address.http_port
        bad = [
            ("PUT", "/api/v1/bookie/gc", b"{not json", "not JSON"),
            ("PUT", "/api/v1/bookie/gc", [True], "JSON object"),
            ("PUT", "/api/v1/bookie/gc", {"forceMajr": True}, "unknown key 'forceMajr'"),
            ("PUT", "/api/v1/bookie/gc", {"forceMajor": "yes"}, "forceMajor must be"),
            ("PUT", "/api/v1/bookie/gc/suspend_compaction", b"", "is required"),
            ("PUT", "/api/v1/bookie/gc/suspend_compaction", {"suspendMajor": False}, "nothing"),
            ("PUT", "/api/v1/bookie/gc/resume_compaction", {"resumeMinor": 1}, "resumeMinor"),
        ]
        for method, path, body, message in bad:
            status, answer = await call(port, method, path, body)
            assert status == 400, (path, body)
            assert message in answer["error"], (answer, message)
        assert await call(
            port, "PUT", "/api/v1/bookie/gc/suspend_compaction", {"suspendMajor": True}
        ) == (200, {"isMajorGcSuspended": "true", "isMinorGcSuspended": "false"})
        assert service.bookie.gc.suspend_major
        assert await call(
            port, "PUT", "/api/v1/bookie/gc/resume_compaction", {"resumeMajor": True}
        ) == (200, {"isMajorGcSuspended": "false", "isMinorGcSuspended": "false"})
        # Without ?wait= the answer is upstream's (tests/bookie/test_http_upstream.py).
        status, answer = await call(
            port, "PUT", "/api/v1/bookie/gc?wait=false", {"forceMinor": False}
        )
        assert status == 200
        assert answer["triggered"]
        assert "report" not in answer


async def test_shell_gc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledgers = FakeLedgers(SHARE)
    async with running_bookie(cfg(tmp_path)) as service:
        assert service.address is not None
        port = str(service.address.http_port)
        service.bookie.gc.ledger_source = ledgers
        async with bookie_client(service) as client:
            await write_rounds(client, 2)
        service.bookie.storage.entry_logger.create_new_log(1)
        await service.bookie.checkpoint()
        ledgers.ids.discard(3)

        def shell(*args: str) -> int:
            return main(["shell", "gc", *args])

        code = await trio.to_thread.run_sync(shell, "--port", port, "--json", "--no-compaction")
        assert code == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert lines[0]["type"] == "gc"
        assert lines[0]["ledgersDeleted"] == [3]
        assert lines[0]["compaction"] is None
        logs = [line for line in lines if line["type"] == "entryLog"]
        assert logs
        assert all(set(log["ledgers"]) <= {1, 2} for log in logs)
        assert lines[-1]["type"] == "summary"
        assert lines[-1]["logs"] == len(logs)

        url = f"http://127.0.0.1:{port}"
        assert await trio.to_thread.run_sync(shell, "--url", url, "--details") == 0
        out = capsys.readouterr().out
        assert "remainingSize" in out
        assert "entry log" in out

        assert await trio.to_thread.run_sync(shell, "--port", port, "--suspend", "both") == 0
        assert service.bookie.gc.suspend_major
        assert service.bookie.gc.suspend_minor
        capsys.readouterr()

    assert shell("--port", "1") == 2  # nobody listens
    assert "bookiesim shell gc:" in capsys.readouterr().err
    assert shell() == 2
    assert "--port" in capsys.readouterr().err
