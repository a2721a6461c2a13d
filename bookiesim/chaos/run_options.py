"""What one run is asked to do (``bookiesim chaos run``'s options), and how its history's
header records it, so that ``chaos replay`` can ask for the same run again (no I/O).

Keys a later version added are read back from older headers with the value that reproduces
what those runs did (``chaos_command._replay``): no ``zookeepers`` with ``zk`` metadata is one
server, no ``autorecovery_faults`` a schedule drawn from the bookies alone, no ``cluster``
bookiesim's bookies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bookiesim.chaos.target import CURRENT, Target
from bookiesim.chaos.upstream.cluster import bookie_kinds
from bookiesim.chaos.zookeepers import zookeeper_nodes

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.chaos.upstream.cluster import BookieKind
    from bookiesim.chaos.workloads import WriterSpec

__all__ = ["BUGS", "CLIENT", "CONVERGENCE", "HISTORY_NAME", "RunOptions", "spec_text"]

BUGS: dict[str, tuple[str, str]] = {
    "add-ignores-fence": (
        "unsafeAddIgnoresFence=true",
        "every bookie acknowledges a writer's add into a fenced ledger, so a writer goes on "
        "past the end a recovery closed the ledger at (the checker's `fencing`)",
    ),
}
"""Bug switches live bookies carry, by name: the bookie setting and what it breaks."""

CLIENT = "c1"
HISTORY_NAME = "history.jsonl"
CONVERGENCE = 90.0
"""Seconds after the heal within which every ledger must be replicated and a probe write
succeed (the checker's bound, stated in the header)."""
READ_ERROR_SETTINGS = ("flushInterval=1000",)
"""With the ``eio`` family: a checkpoint a second, so that entries leave the sorted table (and
locations the index's memory) for the files a read-error fault hits within a second, not ten."""


def spec_text(spec: WriterSpec) -> str:
    """``3/2/2`` or ``3/2/2v2``, as ``--writers`` takes it."""
    return f"{spec.ensemble}/{spec.write_quorum}/{spec.ack_quorum}{'v2' if spec.v2 else ''}"


@dataclass(frozen=True)
class RunOptions:
    seed: int
    duration: float
    families: list[str]
    bookies: int
    out: Path
    writers: list[WriterSpec]
    journeys: tuple[str, ...] = ("ledger",)
    """The command-line journeys: ``ledger`` (create, write, ...) and ``cluster``."""
    bugs: list[str] = field(default_factory=list)
    metadata: str = "sqlite"
    """``sqlite`` (a file every node sees) or ``zk`` (ZooKeeper servers in nodes ``zk1``..)."""
    zookeepers: int = 3
    """ZooKeeper servers with ``zk`` metadata (1 or 3), each in a node of its own."""
    target: Target = CURRENT
    """The bookiesim the bookies and the journeys run (``--bookiesim-from``)."""
    overlap: bool = False
    """Faults may overlap in time (:mod:`bookiesim.chaos.overlap`)."""
    autorecovery_faults: bool = True
    """``crash`` and ``pause`` may hit the auto-recovery daemons' nodes (False only in the
    replay of a history from before they had nodes: its schedule drew bookies alone)."""
    cluster: str = "bookiesim"
    """Whose bookies: ``bookiesim``, ``upstream`` or ``mixed`` (:mod:`.upstream.cluster`)."""
    bookkeeper_home: Path | None = None
    """Upstream's installation, for ``upstream``/``mixed`` clusters and Java writers."""
    java_writers: list[WriterSpec] = field(default_factory=list)
    """Writers through upstream's own Java client (:mod:`.upstream.java_writer`)."""

    @property
    def zookeeper_nodes(self) -> list[str]:
        return zookeeper_nodes(self.zookeepers) if self.metadata == "zk" else []

    @property
    def bookie_nodes(self) -> list[str]:
        return [f"b{i}" for i in range(1, self.bookies + 1)]

    @property
    def kinds(self) -> dict[str, BookieKind]:
        """Whose bookie each node runs."""
        return bookie_kinds(self.cluster, self.bookie_nodes)

    @property
    def max_down(self) -> int:
        """Bookies the writers' ensembles survive losing at once: what overlapping faults
        may take down together."""
        every = [*self.writers, *self.java_writers]
        return self.bookies - max((w.ensemble for w in every), default=0)

    def meta(self) -> dict[str, Any]:
        return {
            "run": self.out.name,
            "target": self.target.name,
            **({"target_commit": self.target.commit} if self.target.commit else {}),
            "cluster": self.cluster,
            **(
                {"bookkeeper_home": str(self.bookkeeper_home)}
                if self.bookkeeper_home is not None
                else {}
            ),
            "seed": self.seed,
            "duration": self.duration,
            "families": self.families,
            "bookies": self.bookies,
            "writers": [spec_text(w) for w in self.writers],
            "java_writers": [spec_text(w) for w in self.java_writers],
            "journeys": list(self.journeys),
            "bugs": self.bugs,
            "metadata": self.metadata,
            "zookeepers": len(self.zookeeper_nodes),
            "overlap": self.overlap,
            "autorecovery_faults": self.autorecovery_faults,
            "bounds": {"convergence": CONVERGENCE, "journey_grace": 15.0},
        }
