"""``bookiesim chaos``: faults on real processes (docs/chaos.md).

- ``run``: one seeded schedule against bookiesim bookies in network namespaces; exit 0 when
  the checker finds no violation, 1 with the violations printed, 2 for bad arguments, 3 with
  one line when privilege or a tool is missing or the cluster could not be started.
- ``replay HISTORY_OR_DIR``: the same run again, from the options its history's header names.
- ``campaign --seeds K``: K runs (seeds S..S+K-1), then the table by fault kind
  (``campaign.md`` in ``--out``); exit 1 when any run found a violation.

- ``cleanup``: remove every network namespace, link and nft table whose name starts with
  ``bks-`` (what a harness killed with SIGKILL leaves), killing the processes still running
  in those namespaces first. Prints one line per thing removed, or that nothing was left;
  exit 0, also when run again. ``--run ID`` limits it to one run's names. Exit 1 with one
  line when something could not be removed (for instance without root).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from bookiesim.chaos.harness import BUGS, HISTORY_NAME, RunOptions, run_schedule
from bookiesim.chaos.history import HistoryError, read_history
from bookiesim.chaos.lazyfs.mount import missing as lazyfs_missing
from bookiesim.chaos.nemesis import FAMILIES, LAZY_DISK_FAMILIES, parse_families
from bookiesim.chaos.netns import NetworkError, cleanup, leftovers, missing_privilege
from bookiesim.chaos.network import PREFIX
from bookiesim.chaos.report import campaign_markdown, campaign_rows, load_summaries, render_campaign
from bookiesim.chaos.target import CURRENT, TargetError, open_target, target_dir
from bookiesim.chaos.upstream.cluster import CLUSTERS
from bookiesim.chaos.workloads import WriterSpec, parse_writers
from bookiesim.client.errors import BKError
from bookiesim.cluster.processes import ClusterError
from bookiesim.console import make_console
from bookiesim.metadata.errors import MetadataError
from bookiesim.upstream.installation import installation

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "chaos",
        help="faults on real processes: network namespaces, the nemesis",
        description="Faults on real processes (docs/chaos.md).",
    )
    commands = parser.add_subparsers(dest="chaos_command", metavar="COMMAND", required=True)
    clean = commands.add_parser(
        "cleanup",
        help=f"remove every namespace, link and nft table named {PREFIX}* (and its processes)",
        description="Remove what a killed chaos run left behind: network namespaces (after "
        "killing the processes in them), links and nft tables whose name starts with "
        f"{PREFIX!r}.",
    )
    clean.add_argument(
        "--run",
        metavar="ID",
        help="only that run's (bks-ID, bks-ID-*): other runs going on are left alone",
    )
    clean.set_defaults(func=_cleanup)

    run = commands.add_parser(
        "run",
        help="one seeded schedule of faults against bookiesim bookies, then the checker",
        description="Start bookies in network namespaces, run the workloads and a seeded "
        "schedule of faults, heal, read everything back and check the history. Exit 0: no "
        "violation; 1: violations (printed); 2: bad arguments; 3: privilege, a tool or the "
        "cluster missing.",
    )
    _run_options(run, campaign=False)
    run.set_defaults(func=_run)
    replay = commands.add_parser(
        "replay",
        help="run a recorded schedule again (the options its history's header names)",
        description="Run again the schedule a history records: same seed, duration, "
        "families, bookies, writers and --overlap. The new run goes to --out (default: next to the "
        "history, DIR-replay, DIR-replay2, ...).",
    )
    replay.add_argument("history", type=Path, metavar="HISTORY_OR_DIR")
    replay.add_argument("--out", type=Path, help="directory for the new run")
    replay.set_defaults(func=_replay)
    campaign = commands.add_parser(
        "campaign",
        help="several runs (one per seed), then the table by fault kind",
        description="Runs seeds S..S+K-1 (each into OUT/seed-N), then prints the table by "
        "fault kind and writes it to OUT/campaign.md. Exit 1 when a run found a violation.",
    )
    campaign.add_argument("--seeds", type=int, default=3, help="how many runs (default 3)")
    _run_options(campaign, campaign=True)
    campaign.set_defaults(func=_campaign)


def _run_options(parser: argparse.ArgumentParser, *, campaign: bool) -> None:
    parser.add_argument(
        "--seed",
        type=int,
        default=1,
        help="the schedule's seed" + (" (the first)" if campaign else ""),
    )
    parser.add_argument("--duration", type=float, default=60, help="seconds of faults (default 60)")
    parser.add_argument(
        "--families",
        default="all",
        help=f"fault families, comma-separated: {', '.join(FAMILIES)}, or all (default)",
    )
    parser.add_argument("--bookies", type=int, default=4, help="bookies (default 4)")
    parser.add_argument(
        "--writers",
        default="3/3/2,3/2/2,2/2/2v2",
        help="writers' E/Qw/Qa, v2 after one for that protocol (default 3/3/2,3/2/2,2/2/2v2)",
    )
    parser.add_argument(
        "--journeys",
        default="ledger",
        help="command-line journeys, comma-separated: ledger (default: create, write, close, "
        "recover, read), cluster (once: cluster up, cookies, write, down, up again, read; "
        "seconds of CPU), or none",
    )
    parser.add_argument("--no-journeys", action="store_true", help="no journeys (--journeys none)")
    parser.add_argument(
        "--bookiesim-from",
        type=Path,
        metavar="DIR",
        help="run the bookies and the journeys' commands from the bookiesim in DIR (an older "
        "checkout: its .venv/bin/python if it has one, else this Python with PYTHONPATH=DIR); "
        "the harness, the workloads' client and the checker stay this one",
    )
    parser.add_argument(
        "--cluster",
        choices=sorted(CLUSTERS),
        default="bookiesim",
        help="whose bookies: "
        + "; ".join(f"{name}: {what}" for name, what in CLUSTERS.items())
        + " (default bookiesim)",
    )
    parser.add_argument(
        "--bookkeeper-home",
        type=Path,
        metavar="DIR",
        help="upstream BookKeeper's installation (lib/*.jar, Java 17) for --cluster "
        "upstream/mixed and --java-writers (default: BOOKKEEPER_HOME)",
    )
    parser.add_argument(
        "--java-writers",
        default="",
        metavar="SPECS",
        help="writers through upstream's own Java client, E/Qw/Qa comma-separated (compiled "
        "at run time against the installation; default none)",
    )
    parser.add_argument(
        "--overlap",
        action="store_true",
        help="faults may overlap in time, never taking down more bookies at once than the "
        "writers' ensembles survive (bookies - max E); default: one at a time",
    )
    parser.add_argument(
        "--metadata",
        choices=["sqlite", "zk"],
        default="sqlite",
        help="sqlite (default: a file every node sees) or zk (ZooKeeper servers, each in a node "
        "of its own; needs java and ZooKeeper's jar)",
    )
    parser.add_argument(
        "--zookeepers",
        type=int,
        default=3,
        help="ZooKeeper servers with --metadata zk: 3 (default, an ensemble in zk1..zk3) or 1",
    )
    parser.add_argument(
        "--bug",
        action="append",
        default=[],
        choices=sorted(BUGS),
        help="a bug switch every bookie carries, to show the checker bites: "
        + "; ".join(f"{k}: {v[1]}" for k, v in sorted(BUGS.items())),
    )
    parser.add_argument("--out", type=Path, required=True, help="a new directory for the output")


def _options(args: argparse.Namespace, out: Path) -> RunOptions:
    """The run's options, or ``ValueError`` with one line."""
    if args.duration < 5:
        raise ValueError("--duration must be at least 5 seconds")
    if args.bookies < 3:
        raise ValueError("--bookies must be at least 3 (the writers' ensembles need them)")
    writers = parse_writers(args.writers)
    unknown = sorted(set(args.bug) - set(BUGS))
    if unknown:
        raise ValueError(f"unknown bug switches {unknown}: choose from {', '.join(sorted(BUGS))}")
    if max(w.ensemble for w in writers) > args.bookies:
        raise ValueError(f"a writer's ensemble is larger than --bookies {args.bookies}")
    families = parse_families(args.families)
    if args.zookeepers not in (1, 3):
        raise ValueError("--zookeepers must be 1 or 3")
    lazy = [f for f in LAZY_DISK_FAMILIES if f in families]
    if "disk" in families and lazy:
        raise ValueError(
            f"the disk and {lazy[0]} families cannot run together (a bookie's ledger disk is "
            "either a small tmpfs or a lazy file system)"
        )
    if args.metadata != "zk" and "zk" in families:
        if args.families.strip() != "all":
            raise ValueError("the zk family needs --metadata zk")
        families.remove("zk")
    java_writers = parse_writers(args.java_writers) if args.java_writers else []
    home = _upstream_home(args, java_writers)
    return RunOptions(
        target=CURRENT if args.bookiesim_from is None else open_target(args.bookiesim_from),
        seed=args.seed,
        duration=float(args.duration),
        families=families,
        bookies=args.bookies,
        out=out,
        writers=writers,
        journeys=_journeys(args),
        bugs=list(args.bug),
        metadata=args.metadata,
        zookeepers=args.zookeepers,
        overlap=args.overlap,
        autorecovery_faults=getattr(args, "autorecovery_faults", True),
        cluster=args.cluster,
        bookkeeper_home=home,
        java_writers=java_writers,
    )


def _upstream_home(args: argparse.Namespace, java_writers: list[WriterSpec]) -> Path | None:
    """The installation an upstream or mixed cluster, or a Java writer, needs (None when the
    run needs none); ``ValueError`` (one line) when it needs one it cannot have."""
    if args.cluster == "bookiesim" and not java_writers:
        return None
    if args.metadata != "zk":
        raise ValueError(
            "upstream's bookies and client need ZooKeeper as the metadata store: give --metadata zk"
        )
    if args.cluster != "bookiesim" and args.bug:
        raise ValueError("bug switches are bookiesim's: --bug needs --cluster bookiesim")
    if args.cluster == "upstream" and args.bookiesim_from is not None:
        raise ValueError("--bookiesim-from runs bookiesim's bookies: not with --cluster upstream")
    found = installation(args.bookkeeper_home)
    if isinstance(found, str):
        raise ValueError(found)
    return found.resolve()


def _journeys(args: argparse.Namespace) -> tuple[str, ...]:
    names = [n.strip() for n in args.journeys.split(",") if n.strip()]
    if args.no_journeys or names == ["none"]:
        return ()
    unknown = sorted(set(names) - {"ledger", "cluster"})
    if unknown or not names:
        raise ValueError(f"unknown journeys {unknown or names}: choose from ledger, cluster, none")
    return tuple(dict.fromkeys(names))


def _cannot_run(options: RunOptions) -> str | None:
    if shutil.which("nft") is None:
        return "nft not found: apt-get install nftables"
    lazy_families = [f for f in LAZY_DISK_FAMILIES if f in options.families]
    if lazy_families:
        lazy = lazyfs_missing()
        if lazy is not None:
            return f"the {lazy_families[0]} family needs a lazy file system: {lazy}"
    return missing_privilege()


def _one_run(options: RunOptions) -> int:
    console = make_console(sys.stdout)
    try:
        return run_schedule(options, console)
    except FileExistsError as exc:
        print(f"chaos run: {exc}", file=sys.stderr)
        return 2
    except (ClusterError, NetworkError, OSError, RuntimeError, MetadataError, BKError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"chaos run: {first}", file=sys.stderr)
        return 3


def _run(args: argparse.Namespace) -> int:
    try:
        options = _options(args, args.out)
    except (ValueError, TargetError) as exc:
        print(f"chaos run: {exc}", file=sys.stderr)
        return 2
    missing = _cannot_run(options)
    if missing is not None:
        print(f"chaos run: {missing}", file=sys.stderr)
        return 3
    return _one_run(options)


def _replay(args: argparse.Namespace) -> int:
    path: Path = args.history
    history_path = path / HISTORY_NAME if path.is_dir() else path
    try:
        meta = read_history(history_path).meta
        families = ",".join(meta["families"]) or "none"
        source = argparse.Namespace(
            seed=int(meta["seed"]),
            duration=float(meta["duration"]),
            families=families,
            bookies=int(meta["bookies"]),
            writers=",".join(meta["writers"]),
            journeys=_recorded_journeys(meta.get("journeys", True)),
            no_journeys=False,
            bookiesim_from=target_dir(str(meta.get("target", "bookiesim"))),
            bug=list(meta.get("bugs", [])),
            metadata=meta.get("metadata", "sqlite"),
            # A zk run from before ensembles had one server; a SQLite run has none (0), and
            # takes the option's default, which it does not use.
            zookeepers=int(meta.get("zookeepers") or (1 if meta.get("metadata") == "zk" else 3)),
            overlap=bool(meta.get("overlap", False)),
            # Before the daemons had nodes of their own, crash and pause drew bookies alone:
            # the same seed then draws the same schedule only without them.
            autorecovery_faults=bool(meta.get("autorecovery_faults", False)),
            cluster=meta.get("cluster", "bookiesim"),
            bookkeeper_home=meta.get("bookkeeper_home"),
            java_writers=",".join(meta.get("java_writers", [])),
        )
    except (OSError, HistoryError) as exc:
        print(f"chaos replay: {exc}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, ValueError) as exc:
        print(
            f"chaos replay: {history_path}: the header names no run to replay ({exc})",
            file=sys.stderr,
        )
        return 2
    out = args.out
    if out is None:
        base = history_path.parent
        out = base.with_name(f"{base.name}-replay")
        n = 2
        while out.exists():
            out = base.with_name(f"{base.name}-replay{n}")
            n += 1
    try:
        options = _options(source, out)
    except (ValueError, TargetError) as exc:
        print(f"chaos replay: {exc}", file=sys.stderr)
        return 2
    missing = _cannot_run(options)
    if missing is not None:
        print(f"chaos replay: {missing}", file=sys.stderr)
        return 3
    print(f"replaying seed {options.seed} into {out}")
    return _one_run(options)


def _recorded_journeys(value: object) -> str:
    """A header's ``journeys``: a list of names, or (histories before the cluster journey)
    a bool for the ledger journey."""
    if isinstance(value, bool):
        return "ledger" if value else "none"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "none"
    raise ValueError(f"journeys {value!r}")


def _run_argv(options: RunOptions, seed: int, out: Path) -> list[str]:
    """The ``bookiesim chaos run`` command of one campaign run."""
    argv = [sys.executable, "-m", "bookiesim", "chaos", "run", "--seed", str(seed)]
    argv += ["--duration", str(options.duration), "--bookies", str(options.bookies)]
    argv += ["--families", ",".join(options.families) or "none", "--out", str(out)]
    argv += ["--metadata", options.metadata, "--writers", ",".join(options.meta()["writers"])]
    argv += ["--zookeepers", str(options.zookeepers)]
    for bug in options.bugs:
        argv += ["--bug", bug]
    argv += ["--journeys", ",".join(options.journeys) or "none"]
    if options.target.root is not None:
        argv += ["--bookiesim-from", str(options.target.root)]
    argv += ["--overlap"] if options.overlap else []
    argv += ["--cluster", options.cluster]
    if options.bookkeeper_home is not None:
        argv += ["--bookkeeper-home", str(options.bookkeeper_home)]
    if options.java_writers:
        argv += ["--java-writers", ",".join(options.meta()["java_writers"])]
    return argv


def _campaign(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        print("chaos campaign: --seeds must be at least 1", file=sys.stderr)
        return 2
    try:
        first = _options(args, args.out / f"seed-{args.seed}")
    except (ValueError, TargetError) as exc:
        print(f"chaos campaign: {exc}", file=sys.stderr)
        return 2
    missing = _cannot_run(first)
    if missing is not None:
        print(f"chaos campaign: {missing}", file=sys.stderr)
        return 3
    codes = []
    summaries = []
    for seed in range(args.seed, args.seed + args.seeds):
        out = args.out / f"seed-{seed}"
        # Each run is a process of its own: a run enters its client node's network namespace,
        # and threads a previous run left (trio's worker cache, ZooKeeper clients') would stay
        # in that run's namespace, gone by now.
        code = subprocess.run(_run_argv(first, seed, out), check=False).returncode
        if code not in (0, 1):
            print(f"chaos campaign: the run of seed {seed} ended with exit code {code}")
            return code
        codes.append(code)
        summaries.append(out / "summary.json")
    rows = campaign_rows(load_summaries(summaries))
    console = make_console(sys.stdout)
    render_campaign(rows, console)
    (args.out / "campaign.md").write_text(campaign_markdown(rows), encoding="utf-8")
    (args.out / "campaign.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 1 if any(codes) else 0


def _cleanup(args: argparse.Namespace) -> int:
    pattern = f"{PREFIX}*" if args.run is None else f"{PREFIX}{args.run}*"
    try:
        found = leftovers(args.run)
        if not found:
            print(f"chaos cleanup: nothing named {pattern} left")
            return 0
        missing = missing_privilege()
        if missing is not None:
            print(f"chaos cleanup: {len(found)} left but cannot remove them: {missing}")
            return 1
        removed = cleanup(args.run)
    except NetworkError as exc:
        print(f"chaos cleanup: {exc}")
        return 1
    for line in removed:
        print(f"removed {line}")
    return 0
