"""Everything random in a simulated run comes from one seed.

Two sources of randomness are not ours and must be pinned too:

* trio's scheduler reverses each batch of runnable tasks at random (``trio._core._run._r``)
  and breaks ties between equal deadlines by object address. With
  ``_ALLOW_DETERMINISTIC_SCHEDULING`` — the switch pytest-trio sets for hypothesis — each
  batch is sorted by task creation order and shuffled by ``_r``; seeding ``_r`` then makes
  the schedule a function of the seed. Private API, so it lives in this one place.
* the ``random`` module: the metadata layer's compare-and-set retry backs off by
  ``random.uniform``. We seed it for the run and give the previous state back after.

Our own draws come from :class:`SimRandom` streams, one per purpose ("network", "plan",
"writer-1", ...), each seeded from the run's seed and its name, so adding a draw in one place
does not shift every other draw of the run.
"""

from __future__ import annotations

import hashlib
import random
from contextlib import contextmanager
from typing import TYPE_CHECKING

import trio._core._run as trio_run

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["SimRandom", "deterministic_run"]


class SimRandom:
    """Named, independent :class:`random.Random` streams derived from one seed."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._streams: dict[str, random.Random] = {}

    def stream(self, name: str) -> random.Random:
        """The stream called ``name`` (the same object on every call)."""
        rng = self._streams.get(name)
        if rng is None:
            digest = hashlib.sha256(f"{self.seed}/{name}".encode()).digest()
            rng = self._streams[name] = random.Random(int.from_bytes(digest[:8], "big"))
        return rng

    def derive(self, name: str) -> int:
        """A 64-bit seed for something that takes its own (a client's ``ClientConfig``)."""
        return self.stream(f"seed/{name}").getrandbits(63)


@contextmanager
def deterministic_run(seed: int) -> Iterator[None]:
    """Pin trio's scheduling and the ``random`` module to ``seed`` for the block."""
    saved_flag = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    saved_trio = trio_run._r.getstate()
    saved_global = random.getstate()
    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio_run._r.seed(seed)
    random.seed(seed)
    try:
        yield
    finally:
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = saved_flag  # type: ignore[misc]
        trio_run._r.setstate(saved_trio)
        random.setstate(saved_global)
