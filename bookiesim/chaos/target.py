"""Which bookiesim a run's bookies and command-line journeys are: this one, or an older tree's.

``bookiesim chaos run --bookiesim-from DIR`` runs the bookie processes and the journeys'
``bookiesim`` commands from ``DIR`` (a checkout, or a directory holding an installed
``bookiesim`` package), so that an older version can be held to the current harness,
workloads' client and checker: the way to show that the checker catches what an older version
got wrong. ``DIR``'s own ``.venv/bin/python`` runs it if there is one, else this Python; either
way with ``PYTHONPATH=DIR``, and with ``PYTHONSAFEPATH=1`` so that a working directory holding
another ``bookiesim`` (this checkout, say) cannot shadow it.

An older bookie refuses a setting it does not know (an unknown key is a configuration error),
so the target knows its keys (asked of the tree itself once, at the start) and the harness
refuses, in one line, a run that would pass it one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["CURRENT", "Target", "TargetError", "open_target", "target_dir"]

_NAME = "bookiesim"
_FROM = "bookiesim@"
"""A history's ``meta.target``: ``bookiesim`` (this tree) or ``bookiesim@DIR``."""
_PROBE = (
    "import json, bookiesim; from bookiesim.bookie.config import CONFIG_KEYS; "
    "print(json.dumps({'file': bookiesim.__file__, 'keys': sorted(k.key for k in CONFIG_KEYS)}))"
)
"""Run with the target's Python: where its bookiesim comes from and the keys its bookie knows."""


class TargetError(Exception):
    """A directory that cannot be a target; the message is one line for the user."""


@dataclass(frozen=True)
class Target:
    """The bookiesim that runs the bookies and the journeys' commands."""

    root: Path | None = None
    """The older tree, or None: this bookiesim."""
    python: str = sys.executable
    commit: str | None = None
    """The tree's git commit, when it is a checkout (for the record)."""
    keys: frozenset[str] | None = None
    """The configuration keys its bookie knows (None: this bookiesim's, all of them)."""

    @property
    def name(self) -> str:
        """What a history's header records as ``meta.target`` (:func:`target_dir` reads it)."""
        return _NAME if self.root is None else f"{_FROM}{self.root}"

    def describe(self) -> str:
        if self.root is None:
            return "this bookiesim"
        return f"the bookiesim in {self.root}" + (f" ({self.commit[:9]})" if self.commit else "")

    def bookiesim(self) -> list[str]:
        """The argv prefix that runs this target's ``bookiesim`` command."""
        if self.root is None:
            return [sys.executable, "-m", "bookiesim"]
        env = [f"PYTHONPATH={self.root}", "PYTHONSAFEPATH=1", "PYTHONWARNINGS=ignore"]
        return ["env", *env, self.python, "-m", "bookiesim"]

    def bookie_program(self) -> tuple[str, ...]:
        """What :func:`bookiesim.cluster.processes.spawn_bookie` runs (``BOOKIE_PROGRAM``'s
        counterpart): one bookie that takes ``--set key=value`` settings."""
        return (*self.bookiesim(), "bookie")

    def unknown_keys(self, settings: Iterable[str]) -> list[str]:
        """The keys of ``key=value`` settings this target's bookie would refuse."""
        if self.keys is None:
            return []
        return sorted({s.partition("=")[0] for s in settings} - self.keys)


CURRENT = Target()


def target_dir(name: str) -> Path | None:
    """The directory a ``meta.target`` names (None: this bookiesim); ``ValueError`` for
    another target."""
    if name == _NAME:
        return None
    if name.startswith(_FROM) and len(name) > len(_FROM):
        return Path(name.removeprefix(_FROM))
    raise ValueError(f"unknown target {name!r} (bookiesim, or bookiesim@DIR)")


def open_target(directory: Path) -> Target:
    """The bookiesim tree in ``directory``, asked which keys its bookie knows;
    :class:`TargetError` (one line) when it is not one or cannot run."""
    root = directory.resolve()
    if not (root / "bookiesim" / "__main__.py").is_file():
        raise TargetError(
            f"--bookiesim-from {directory}: not a bookiesim tree (no bookiesim/__main__.py in it)"
        )
    venv = root / ".venv" / "bin" / "python"
    target = Target(root=root, python=str(venv) if venv.exists() else sys.executable)
    try:
        done = subprocess.run(
            [*target.bookiesim()[:-2], "-c", _PROBE],
            capture_output=True, text=True, check=False, timeout=60, cwd=root,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetError(
            f"--bookiesim-from {directory}: cannot run {target.python}: {exc}"
        ) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise TargetError(f"--bookiesim-from {directory}: its bookiesim does not start: {last}")
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
        where, keys = Path(found["file"]).resolve(), frozenset(found["keys"])
    except (ValueError, IndexError, KeyError, TypeError):
        raise TargetError(f"--bookiesim-from {directory}: unexpected probe output") from None
    if not where.is_relative_to(root):
        raise TargetError(
            f"--bookiesim-from {directory}: its Python imports bookiesim from {where.parent}, "
            "not from it"
        )
    return Target(root=root, python=target.python, commit=_commit(root), keys=keys)


def _commit(root: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, check=False, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None
