"""``bookiesim chaos``: faults on real processes (docs/chaos.md).

- ``cleanup``: remove every network namespace, link and nft table whose name starts with
  ``bks-`` (what a harness killed with SIGKILL leaves), killing the processes still running
  in those namespaces first. Prints one line per thing removed, or that nothing was left;
  exit 0, also when run again. ``--run ID`` limits it to one run's names. Exit 1 with one
  line when something could not be removed (for instance without root).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.chaos.netns import NetworkError, cleanup, leftovers, missing_privilege
from bookiesim.chaos.network import PREFIX

if TYPE_CHECKING:
    import argparse

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
