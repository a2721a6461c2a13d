"""``bookiesim bench shards``: what a bookie split into two processes could reach, before
building it.

Why it exists: issue 35's second design is a bookie made of shards, a process each, owning
the ledgers that hash to it, so that the second core serves adds without a hand-off per add
(``bench handoff`` measured that toll). Building it is weeks of work: cookie, registration,
forwarding, metrics, tools. This measures its ceiling first, with what exists: two
independent bookie processes, each with its own journal and ledger directories on the same
disk, stand in for two perfectly partitioned shards (no frame ever arrives at the wrong one,
nothing shared). Beside them, in the same repetition and with the same two load clients, the
one-process bookie of today:

* **one process**: one bookie; two load clients, each sending ``--adds / 2`` adds round robin
  over its half of ``--ledgers`` (disjoint ledger ids);
* **two shards**: two bookies; each load client sends the same adds to its own bookie;
* **relay**: one bookie, and the load clients' frames relayed to it through a frame relay
  process (:mod:`.relay`): the relay's CPU per add is the toll of forwarding one add, which a
  sharded bookie's accepting shard pays for every frame of the other shard (with one channel
  per bookie, every other frame of a two-shard bookie).

The runs alternate (one, two, relay) in each repetition. Per run: adds/s (all the adds over
the longer client's timed span: both clients build their frames first and start within a
fraction of a second), the bookies' CPU per add (every process and thread, ``/proc``), and the
clients' p99 (the worse of the two). Each bookie runs with ``bench compare``'s settings
(journalSyncData, entry log per ledger, the sorted storage). A real sharded bookie would pay
for forwarding frames that reach the wrong shard and for a shared registration; this figure is
the bound that cost comes off.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bookiesim.bench.bookie import process_cpu_seconds
from bookiesim.bench.compare_run import SETTINGS
from bookiesim.bench.report import (
    BenchRun,
    Figure,
    Ratio,
    describe_machine,
    machine_info,
    new_figures,
    positive_int,
    step_progress,
)
from bookiesim.cluster.processes import bookie_process

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["RATIOS", "register", "run_layout"]

DEFAULTS: Final = {"adds": 3_000_000, "ledgers": 10, "size": 1024, "repeats": 3}
LAYOUTS: Final = ("one", "two", "relay")
"""One bookie process for both load clients; a bookie process per load client; one bookie
behind a frame relay."""
LAYOUT_NAMES: Final = {"one": "one process", "two": "two shards", "relay": "relayed"}
CLIENTS: Final = 2

RATIOS = (
    Ratio(
        "addsTwoVsOne",
        "peak adds/s, two shards ÷ one process (the same two load clients)",
        "twoAddsPerSecond",
        "oneAddsPerSecond",
    ),
    Ratio(
        "cpuTwoVsOne",
        "bookie CPU per add, two shards ÷ one process",
        "twoCpuUs",
        "oneCpuUs",
    ),
    Ratio(
        "relayVsBookie",
        "the relay's CPU per forwarded add ÷ the bookie's CPU per add (one process)",
        "relayRelayCpuUs",
        "oneCpuUs",
    ),
)


def _client(
    port: int, ledgers: int, first_ledger: int, adds: int, size: int
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bookiesim.bench.load_client",
            *("--port", str(port), "--ledgers", str(ledgers)),
            *("--first-ledger", str(first_ledger), "--adds", str(adds), "--size", str(size)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _start_relay(to_port: int) -> tuple[subprocess.Popen[str], int]:
    relay = subprocess.Popen(
        [sys.executable, "-m", "bookiesim.bench.relay", "--to", str(to_port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert relay.stdout is not None
    line = relay.stdout.readline()
    if not line:
        _stop_relay(relay)
        raise RuntimeError(f"the relay exited with code {relay.returncode} before listening")
    return relay, int(json.loads(line)["port"])


def _stop_relay(relay: subprocess.Popen[str]) -> None:
    if relay.poll() is None:
        relay.terminate()
    relay.wait(timeout=30)
    if relay.stdout is not None:
        relay.stdout.close()


def run_layout(
    layout: str, directory: Path, *, adds: int, ledgers: int, size: int
) -> dict[str, Any]:
    """One run of ``layout`` (:data:`LAYOUTS`) in a fresh directory under ``directory``,
    removed afterwards: adds/s, the bookies' CPU µs per add, the worse client p99 (ms), and
    for ``relay`` the relay's CPU µs per add."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")
    if ledgers < CLIENTS or adds < CLIENTS:
        raise ValueError(f"--ledgers and --adds must be at least {CLIENTS}")
    root = Path(tempfile.mkdtemp(prefix="bench-shards-", dir=directory))
    settings = [f"{k}={v}" for k, v in SETTINGS.items()]
    per_client = ledgers // CLIENTS
    relay_cpu = 0.0
    try:
        with contextlib.ExitStack() as stack:
            bookies = [
                stack.enter_context(bookie_process(root / f"shard{n}", *settings))
                for n in range(CLIENTS if layout == "two" else 1)
            ]
            ports = [b.bookie_port for b in bookies]
            relay = None
            if layout == "relay":
                relay, relay_port = _start_relay(ports[0])
                stack.callback(_stop_relay, relay)
                ports = [relay_port]
            cpu_before = [process_cpu_seconds(b.proc.pid) for b in bookies]
            relay_before = 0.0 if relay is None else process_cpu_seconds(relay.pid)
            clients = [
                _client(
                    ports[n % len(ports)], per_client, 1 + n * per_client, adds // CLIENTS, size
                )
                for n in range(CLIENTS)
            ]
            outputs = [c.communicate() for c in clients]
            cpu = sum(
                process_cpu_seconds(b.proc.pid) - before
                for b, before in zip(bookies, cpu_before, strict=True)
            )
            if relay is not None:
                relay_cpu = process_cpu_seconds(relay.pid) - relay_before
            for bookie in bookies:
                bookie.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summaries = []
    for client, (out, err) in zip(clients, outputs, strict=True):
        if client.returncode != 0:
            last = (err.strip().splitlines() or [f"exit code {client.returncode}"])[-1]
            raise RuntimeError(f"a load client failed ({layout}): {last}")
        summaries.append(json.loads(out))
    done = sum(int(s["adds"]) for s in summaries)
    return {
        "adds_per_second": done / max(float(s["seconds"]) for s in summaries),
        "cpu_us_per_add": cpu / done * 1e6,
        "relay_cpu_us_per_add": relay_cpu / done * 1e6,
        "p99_ms": max(float(s["p99_ms"]) for s in summaries),
    }


def run_shards_benchmark(
    args: argparse.Namespace, step: Callable[[str], None], directory: Path
) -> dict[str, Figure]:
    specs = []
    for layout, name in LAYOUT_NAMES.items():
        specs += [
            (f"{layout}AddsPerSecond", f"peak adds/s, {name}", "adds/s"),
            (f"{layout}CpuUs", f"bookie CPU per add, {name}", "µs/add"),
            (f"{layout}P99Ms", f"p99 at the peak, {name} (worse client)", "ms"),
        ]
    specs.append(("relayRelayCpuUs", "the relay's CPU per add (the forwarding toll)", "µs/add"))
    figures = new_figures(specs)
    for run in range(1, args.repeats + 1):
        for layout in LAYOUTS:
            step(f"run {run}: {LAYOUT_NAMES[layout]}")
            result = run_layout(
                layout, directory, adds=args.adds, ledgers=args.ledgers, size=args.size
            )
            figures[f"{layout}AddsPerSecond"].runs.append(round(result["adds_per_second"], 1))
            figures[f"{layout}CpuUs"].runs.append(round(result["cpu_us_per_add"], 2))
            figures[f"{layout}P99Ms"].runs.append(round(result["p99_ms"], 2))
            if layout == "relay":
                figures["relayRelayCpuUs"].runs.append(round(result["relay_cpu_us_per_add"], 2))
    return figures


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "shards",
        help="the ceiling of a bookie of two shard processes, beside one process",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dir", type=Path, default=None, help="where the bookies write")
    parser.add_argument("--adds", type=positive_int, default=DEFAULTS["adds"], help="per run")
    parser.add_argument(
        "--ledgers", type=positive_int, default=DEFAULTS["ledgers"], help="split between clients"
    )
    parser.add_argument("--size", type=positive_int, default=DEFAULTS["size"])
    parser.add_argument("--repeats", type=positive_int, default=DEFAULTS["repeats"])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if args.ledgers < CLIENTS or args.adds < CLIENTS:
        print(f"bench shards: --ledgers and --adds must be at least {CLIENTS}", file=sys.stderr)
        return 2
    bench = BenchRun.start("shards", args, {**DEFAULTS, "dir": None})
    directory = args.dir if args.dir is not None else Path.cwd()
    directory.mkdir(parents=True, exist_ok=True)
    machine = machine_info(directory)
    bench.status.print(
        f"bench shards: {args.adds:,} adds of {args.size:,} bytes over {args.ledgers} ledgers "
        f"per run, {args.repeats} repetition(s) ({describe_machine(machine)})"
    )
    with step_progress(bench.status, len(LAYOUTS) * args.repeats) as step:
        try:
            figures = run_shards_benchmark(args, step, directory)
        except RuntimeError as exc:
            print(f"bench shards: {exc}", file=sys.stderr)
            return 1
    settings: dict[str, object] = {
        "adds": args.adds,
        "ledgers": args.ledgers,
        "size": args.size,
        "repeats": args.repeats,
        "bookieSettings": {k: str(v) for k, v in SETTINGS.items()},
        "loadAverageAtEnd": [round(x, 2) for x in os.getloadavg()],
    }
    return bench.finish(settings, figures, RATIOS, machine, as_json=args.json)
