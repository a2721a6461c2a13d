"""``bookiesim bench shards`` runs end to end, small: every layout really ran their adds (the
figures are positive, the clients reported no error), and nothing is left on disk.

Why: the figure it reports (a sharded bookie's ceiling) is only worth something if both
layouts ran the same load to the end; a load client that failed must fail the run, in one
line. Timing thresholds are not tested: benchmarks are not timed tests."""

from __future__ import annotations

import json
from functools import partial
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.bench import relay, shards
from bookiesim.cli.main import main
from bookiesim.proto import v3
from bookiesim.proto.frames import FrameDecoder, encode_frame

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.slow
def test_bench_shards_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--dir", str(tmp_path), "--adds", "4000", "--ledgers", "4", "--repeats", "1"]
    assert main(["bench", "shards", *args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["benchmark"] == "shards"
    figures = report["figures"]
    assert set(figures) == {
        f"{layout}{what}"
        for layout in ("one", "two", "relay")
        for what in ("AddsPerSecond", "CpuUs", "P99Ms")
    } | {"relayRelayCpuUs"}
    for figure in figures.values():
        assert len(figure["runs"]) == 1
        assert figure["min"] > 0
    assert {r["key"] for r in report["ratios"]} == {r.key for r in shards.RATIOS}
    assert list(tmp_path.iterdir()) == []  # every layout's directories are gone


def test_too_few_ledgers_for_two_clients_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "shards", "--ledgers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["bench shards: --ledgers and --adds must be at least 2"]


def test_an_unknown_layout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="layout 'three'"):
        shards.run_layout("three", tmp_path, adds=10, ledgers=2, size=64)


async def test_the_relay_passes_every_frame_both_ways_and_names_its_ledger() -> None:
    # A stand-in bookie that answers each add request with its ledger id, behind the relay:
    # what a client sends arrives whole at the owner, and every answer comes back whole.
    async def owner(stream: trio.SocketStream) -> None:
        decoder = FrameDecoder()
        while data := await stream.receive_some(65536):
            decoder.receive_data(data)
            for frame in decoder.next_frames():
                answer = relay.ledger_of(frame).to_bytes(8, "big")
                await stream.send_all(encode_frame(answer))

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, owner, 0, host="127.0.0.1"))
        owner_port = listener.socket.getsockname()[1]
        front_handler = partial(relay.relay_connection, to_port=owner_port)
        (front,) = await nursery.start(partial(trio.serve_tcp, front_handler, 0, host="127.0.0.1"))
        client = await trio.open_tcp_stream("127.0.0.1", front.socket.getsockname()[1])
        frames = [
            encode_frame(v3.encode_request(v3.add_request(ledger, 0, b"", b"x" * 300), ledger))
            for ledger in (7, 8, 2**40)
        ]
        await client.send_all(b"".join(frames))
        decoder, answers = FrameDecoder(), list[int]()
        while len(answers) < 3:
            decoder.receive_data(await client.receive_some(65536))
            answers += [int.from_bytes(f, "big") for f in decoder.next_frames()]
        assert answers == [7, 8, 2**40]
        await client.aclose()
        nursery.cancel_scope.cancel()
