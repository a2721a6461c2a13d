"""``bookiesim pipeline inventory|gc-report|consistency --input PATH... --output DIR``.

Local mode with every core unless ``--master`` names another; the same file runs under
``spark-submit`` (which then supplies the master)::

    spark-submit "$(python -c 'import bookiesim.cli.pipeline_command as c; print(c.__file__)')" \\
        inventory --input /data/bookie-1 --output /tmp/out

Inputs are checked before Spark starts: a file that is not an entry log stops the job with
its path and the reason (exit 1), unless ``--skip-bad-files``, which goes on and lists what
it skipped. A log never written (0 bytes: every upstream ledger dir has one) is counted as
empty, not bad. Each ledger dir is its own bookie, named by its cookie's bookie id or its path
(``bookiesim/pipeline/bookies.py``); dirs that would share a name are renamed by their paths,
with a note. Each job writes Parquet under ``--output`` and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
from rich.console import Console
from rich.table import Table

from bookiesim.cli.client_actions import metadata_json
from bookiesim.cluster.control import read_state
from bookiesim.cluster.processes import ClusterError
from bookiesim.metadata.errors import NoSuchLedgerError
from bookiesim.metadata.factory import open_store
from bookiesim.metadata.ledgers import LedgerManager
from bookiesim.pipeline.inputs import (
    DEFAULT_MAX_SPLIT_BYTES,
    BookieNameError,
    InputError,
    find_logs,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["main", "register"]

JOBS = ("inventory", "gc-report", "consistency")


class JobError(Exception):
    """What the user must fix (exit 1)."""


# -- where ledgers and bookies come from -------------------------------------------------------


def _cluster_state(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.cluster is None:
        return None
    try:
        return read_state(Path(args.cluster))
    except ClusterError as exc:
        raise JobError(str(exc)) from exc


def _metadata_uri(args: argparse.Namespace) -> str | None:
    state = _cluster_state(args)
    return args.metadata or (state["metadata"] if state else None)


def _bookie_ids(args: argparse.Namespace) -> dict[str, str]:
    ids: dict[str, str] = {}
    state = _cluster_state(args)
    if state:
        # A bookie that never started has no id yet.
        ids.update({b["name"]: b["bookieId"] for b in state["bookies"] if b.get("bookieId")})
    for pair in args.bookie_id:
        name, sep, bookie_id = pair.partition("=")
        if not sep:
            raise JobError(f"--bookie-id wants NAME=HOST:PORT, got {pair!r}")
        ids[name] = bookie_id
    return ids


def _ledger_metadata(uri: str) -> list[dict[str, Any]]:
    """Every ledger's metadata, in ``bookiesim ledger list --json``'s form."""

    async def read_all() -> list[dict[str, Any]]:
        out = []
        async with open_store(uri) as store:
            manager = LedgerManager(store)
            for ledger_id in await manager.list_ledgers():
                try:
                    metadata, version = await manager.read(ledger_id)
                except NoSuchLedgerError:
                    continue
                out.append(metadata_json(ledger_id, metadata, version))
        return out

    return trio.run(read_all)


def _read_ledgers_json(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError) as exc:
        raise JobError(
            f"{path}: not ledger metadata as `ledger list --json` prints: {exc}"
        ) from exc


def _live_ledgers(args: argparse.Namespace) -> set[int]:
    if args.live_ledgers is not None:
        try:
            text = Path(args.live_ledgers).read_text()
            return {int(tok) for tok in text.replace(",", " ").split()}
        except (OSError, ValueError) as exc:
            raise JobError(f"{args.live_ledgers}: not a list of ledger ids: {exc}") from exc
    uri = _metadata_uri(args)
    if uri is None:
        raise JobError("say which ledgers are live: --live-ledgers FILE, --metadata or --cluster")
    return {int(m["ledgerId"]) for m in _ledger_metadata(uri)}


# -- summaries -------------------------------------------------------------------------------


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 1024:,.1f} KiB"


def _print_inventory(console: Console, summary: Any) -> None:
    table = Table(title="inventory: per bookie")
    for column in ("bookie", "ledgers", "entries", "bytes"):
        table.add_column(column, justify="left" if column == "bookie" else "right")
    for bookie, per in sorted(summary.by_bookie.items()):
        table.add_row(bookie, f"{per['ledgers']:,}", f"{per['entries']:,}", _mib(per["bytes"]))
    table.add_row(
        "all", f"{summary.ledgers:,}", f"{summary.entries:,}", _mib(summary.bytes), style="bold"
    )
    console.print(table)
    console.print(f"torn tails: {summary.torn_tails} ({summary.torn_bytes:,} bytes)")


def _print_gc(console: Console, summary: Any, verdicts: Sequence[Any]) -> None:
    table = Table(title="gc-report: per log")
    for column in ("bookie", "log", "total", "live", "usage", "action"):
        table.add_column(column, justify="left" if column in ("bookie", "action") else "right")
    for v in verdicts[:50]:
        table.add_row(
            v.bookie,
            str(v.log_id),
            _mib(v.total_bytes),
            _mib(v.live_bytes),
            f"{v.usage:.0%}",
            v.action,
        )
    console.print(table)
    if len(verdicts) > 50:
        console.print(f"… and {len(verdicts) - 50} more logs (all in the Parquet output)")
    actions = ", ".join(f"{k}={n}" for k, n in sorted(summary.actions.items())) or "none"
    console.print(
        f"{summary.logs} logs, {_mib(summary.total_bytes)} of entries, {_mib(summary.live_bytes)} "
        f"live; actions: {actions}\nGC would reclaim {_mib(summary.reclaimed_by_deletion)} by "
        f"deleting logs and {_mib(summary.reclaimed_by_compaction)} by compaction, which would "
        f"copy {_mib(summary.copied_by_compaction)}"
    )


def _print_consistency(console: Console, summary: Any) -> None:
    table = Table(title=f"consistency: {summary.ledgers} ledgers, {summary.expected:,} replicas")
    for column in ("bookie", "missing", "unexpected"):
        table.add_column(column, justify="left" if column == "bookie" else "right")
    for bookie in summary.bookies:
        table.add_row(
            bookie,
            f"{summary.missing.get(bookie, 0):,}",
            f"{summary.unexpected.get(bookie, 0):,}",
        )
    console.print(table)
    reasons = ", ".join(f"{k}: {n}" for k, n in sorted(summary.unexpected_reasons.items()))
    console.print(f"unexpected entries by reason: {reasons or 'none'}")


# -- running a job -------------------------------------------------------------------------


def _master(args: argparse.Namespace) -> str | None:
    if args.master is not None:
        return str(args.master)
    # Under spark-submit the gateway is already up and the master comes from there.
    return None if "PYSPARK_GATEWAY_PORT" in os.environ else "local[*]"


def run_job(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    found = find_logs(args.input, bookie=args.bookie, skip_bad_files=args.skip_bad_files)
    files, skipped = found.files, found.skipped
    if not files:
        never = f" ({len(found.empty)} never written)" if found.empty else ""
        raise JobError(
            f"no entries in entry logs under {', '.join(args.input)}{never}; a running "
            "bookie's newest entries are in its journal until its next checkpoint (every "
            "flushInterval), or stop it (cluster stop/down): its last checkpoint writes them"
        )
    for note in found.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    for bad in skipped:
        console.print(f"skipped {bad}", markup=False, soft_wrap=True)
    output = Path(args.output)
    # Ask for the metadata before Spark starts: a wrong URI fails in a second, not after 10.
    live = _live_ledgers(args) if args.job == "gc-report" else None
    ledgers: list[Mapping[str, Any]] | None = None
    if args.job == "consistency":
        if args.ledgers_json is not None:
            ledgers = list(_read_ledgers_json(Path(args.ledgers_json)))
        elif (uri := _metadata_uri(args)) is not None:
            ledgers = list(_ledger_metadata(uri))
        else:
            raise JobError(
                "say where the ledger metadata is: --metadata, --cluster or --ledgers-json"
            )

    # pyspark loads here, not at import: it takes seconds, and every other command shares
    # this module's parser.
    from bookiesim.pipeline.session import entrylog_tasks, spark_session, stage_progress

    started = time.monotonic()
    with console.status("starting Spark…"):
        spark = spark_session(_master(args), app_name=f"bookiesim {args.job}", ui=args.ui)
    df = (
        spark.read.format("entrylog")
        .option("problems", "true")
        .option("skipBadFiles", str(args.skip_bad_files).lower())
        .option("maxSplitBytes", str(args.max_split_mb << 20))
        .option("partitions", str(entrylog_tasks(spark)))
        .option("pulsar", str(not args.no_pulsar).lower())
        .options(**({"bookie": args.bookie} if args.bookie else {}))
        # The inventory needs no row per entry: the workers pre-aggregate (pipeline/blocks.py).
        .option("combine", "blocks" if args.job == "inventory" else "none")
        .load([f.path for f in files])
    )
    result: dict[str, Any] = {"job": args.job, "output": str(output), "files": len(files)}
    result["skippedFiles"] = [str(bad) for bad in skipped]
    result["emptyFiles"] = len(found.empty)
    result["bookies"] = sorted({f.bookie for f in files})
    with stage_progress(spark, console, args.job):
        if args.job == "inventory":
            from bookiesim.pipeline.jobs.inventory import inventory

            summary = inventory(df, output)
            _print_inventory(console, summary)
            result.update(
                ledgers=summary.ledgers,
                entries=summary.entries,
                bytes=summary.bytes,
                tornTails=summary.torn_tails,
                tornBytes=summary.torn_bytes,
            )
        elif args.job == "gc-report":
            from bookiesim.pipeline.jobs.gc_report import gc_report

            assert live is not None
            gc_summary, verdicts = gc_report(
                spark,
                df,
                live,
                output,
                minor_threshold=args.minor_threshold,
                major_threshold=args.major_threshold,
            )
            _print_gc(console, gc_summary, verdicts)
            result.update(
                logs=gc_summary.logs,
                actions=gc_summary.actions,
                reclaimedByDeletion=gc_summary.reclaimed_by_deletion,
                reclaimedByCompaction=gc_summary.reclaimed_by_compaction,
                copiedByCompaction=gc_summary.copied_by_compaction,
            )
        else:
            from bookiesim.pipeline.jobs.consistency import consistency

            assert ledgers is not None
            c_summary = consistency(spark, df, ledgers, output, _bookie_ids(args))
            _print_consistency(console, c_summary)
            result.update(
                ledgers=c_summary.ledgers,
                expected=c_summary.expected,
                missing=c_summary.missing,
                unexpected=c_summary.unexpected,
                unexpectedReasons=c_summary.unexpected_reasons,
            )
    result["seconds"] = round(time.monotonic() - started, 2)
    console.print(f"Parquet in {output}; {result['seconds']} s with Spark start", markup=False)
    return result


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    jobs = parser.add_subparsers(dest="job", metavar="JOB", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--input",
        nargs="+",
        required=True,
        metavar="PATH",
        help="entry logs, or dirs searched for them (bookie dirs, ledger dirs)",
    )
    common.add_argument("--output", required=True, metavar="DIR", help="where Parquet goes")
    common.add_argument("--master", help="Spark master (default local[*])")
    common.add_argument("--bookie", help="bookie name for every input (default: from paths)")
    common.add_argument(
        "--skip-bad-files",
        action="store_true",
        help="go on past inputs that are not entry logs, and list them",
    )
    common.add_argument(
        "--max-split-mb",
        type=int,
        default=DEFAULT_MAX_SPLIT_BYTES >> 20,
        help="logs bigger than this are split (default 256)",
    )
    common.add_argument("--ui", action="store_true", help="start Spark's web UI")
    common.add_argument(
        "--no-pulsar", action="store_true", help="do not decode Pulsar entries (faster)"
    )
    common.add_argument("--json", action="store_true", help="also print the summary as JSON")
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--cluster", metavar="DIR", help="a `cluster up` dir (metadata, bookie ids)")
    where.add_argument("--metadata", metavar="URI", help="metadata store URI")

    jobs.add_parser(
        "inventory", parents=[common], help="per ledger and bookie: entries, bytes, logs"
    )
    gc = jobs.add_parser(
        "gc-report", parents=[common, where], help="per log: live and dead bytes, what GC would do"
    )
    gc.add_argument("--live-ledgers", metavar="FILE", help="ids of the live ledgers")
    gc.add_argument("--minor-threshold", type=float, default=0.2)
    gc.add_argument("--major-threshold", type=float, default=0.8)
    cons = jobs.add_parser(
        "consistency", parents=[common, where], help="missing and unexpected entries per bookie"
    )
    cons.add_argument("--ledgers-json", metavar="FILE", help="`ledger list --json` output")
    cons.add_argument(
        "--bookie-id",
        action="append",
        default=[],
        metavar="NAME=HOST:PORT",
        help="bookie name in the paths = bookie id in the metadata",
    )
    for sub in (jobs.choices["inventory"],):
        sub.set_defaults(cluster=None, metadata=None)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "pipeline",
        help="Spark jobs over entry logs: inventory, gc-report, consistency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(parser)
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    console = Console(stderr=args.json)
    errors = Console(stderr=True, soft_wrap=True)
    if args.max_split_mb <= 0:
        errors.print("pipeline: --max-split-mb must be positive")
        return 2
    try:
        result = run_job(args, console)
    except (JobError, InputError, BookieNameError) as exc:
        errors.print(f"pipeline {args.job}: {exc}", markup=False)
        return 1
    if args.json:
        print(json.dumps(result))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bookiesim pipeline", description=__doc__)
    _add_arguments(parser)
    return _main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
