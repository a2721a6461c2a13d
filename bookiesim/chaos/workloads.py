"""The workloads of a run, each recording every operation into the history (trio).

They run in the harness process, whose network namespace is the client node's (so their
connections come from that node's address and the nemesis's rules apply to them), except the
command-line journeys, which are ``bookiesim ledger`` processes started in that node.

* writers (:class:`WriterSpec`: E/Qw/Qa, v2 or v3): create a ledger, add entries one after
  the other, close; a failed or unanswered add abandons the ledger (left for the recoverer
  and the final reads) and starts another;
* the tailer: reads the last confirmed entries of a ledger being written, without fencing;
* the recoverer: now and then recovers a ledger while its writer is writing (fencing);
* the journeys: create, write from another process, close, recover, read, each a
  ``bookiesim ledger`` command, recorded as ``journey`` steps with what they need.

Every loop is bounded in time (the run's end) and every operation in time (``OP_TIMEOUT``):
one that runs over is recorded ``unknown``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.client.errors import BKError
from bookiesim.metadata.errors import MetadataError

if TYPE_CHECKING:
    import random
    from collections.abc import Callable, Sequence

    from bookiesim.chaos.history import OpHandle, Recorder
    from bookiesim.client.bookkeeper import BookKeeper
    from bookiesim.client.ledger_handle import LedgerHandle

__all__ = ["OP_TIMEOUT", "Workloads", "WriterSpec", "parse_writers"]

OP_TIMEOUT = 20.0
"""Seconds an operation of a workload may take before it is recorded unknown."""
ENTRIES_PER_LEDGER = 200
"""A writer closes its ledger after this many adds and starts another."""


@dataclass(frozen=True)
class WriterSpec:
    ensemble: int
    write_quorum: int
    ack_quorum: int
    v2: bool = False

    @property
    def name(self) -> str:
        wire = "v2" if self.v2 else "v3"
        return f"{self.ensemble}-{self.write_quorum}-{self.ack_quorum}-{wire}"


def parse_writers(text: str) -> list[WriterSpec]:
    """``3/3/2,3/2/2v2`` -> writers (``v2`` after a triple: that wire protocol).
    ``ValueError`` (one line) for a triple that is not E >= Qw >= Qa >= 1."""
    specs = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        v2 = part.endswith("v2")
        fields = part.removesuffix("v2").removesuffix("v3").split("/")
        try:
            e, w, a = (int(f) for f in fields)
        except ValueError:
            raise ValueError(f"writer {part!r} is not E/Qw/Qa (such as 3/2/2 or 3/2/2v2)") from None
        if not e >= w >= a >= 1:
            raise ValueError(f"writer {part!r}: need E >= Qw >= Qa >= 1")
        specs.append(WriterSpec(e, w, a, v2))
    if not specs:
        raise ValueError("no writers given")
    return specs


def _short(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text[:300]


@dataclass
class Workloads:
    """The workloads of one run and what they leave for the final phase."""

    rec: Recorder
    node: str
    clients: dict[bool, BookKeeper]
    """By ``v2``."""
    rng: random.Random
    end: float
    """``trio.current_time()`` at which the loops stop starting operations."""
    ledgers: set[int] = field(default_factory=set)
    """Every ledger a writer created: the final phase recovers and reads each."""
    writing: dict[int, str] = field(default_factory=dict)
    """Ledgers being written now, with their writer."""

    def _more(self) -> bool:
        return trio.current_time() < self.end

    async def _timed(self, handle: OpHandle, call: Callable[[], Any]) -> tuple[bool, Any]:
        """Run ``call()``; on an error or timeout record it and return ``(False, None)``."""
        try:
            with trio.fail_after(OP_TIMEOUT):
                return True, await call()
        except trio.TooSlowError:
            self.rec.unknown(handle, f"no answer within {OP_TIMEOUT:.0f} s")
        except BKError as exc:
            self.rec.fail(handle, _short(exc))
        except MetadataError as exc:
            # A metadata write that met a lost ZooKeeper connection (its server crashed or cut
            # off) may or may not have been applied.
            self.rec.unknown(handle, _short(exc))
        return False, None

    async def writer(self, spec: WriterSpec, index: int) -> None:
        name = f"writer-{index}"
        bk = self.clients[spec.v2]
        args = {"workload": f"writer {spec.name}"}
        while self._more():
            h = self.rec.invoke("create", process=name, node=self.node, args=args)
            ok, lh = await self._timed(
                h, lambda: bk.create_ledger(spec.ensemble, spec.write_quorum, spec.ack_quorum)
            )
            if not ok:
                await trio.sleep(0.5)
                continue
            self.rec.ok(h, ledger=lh.ledger_id)
            self.ledgers.add(lh.ledger_id)
            self.writing[lh.ledger_id] = name
            try:
                if await self._fill(name, lh, args):
                    await self._close(name, bk, lh, args)
            finally:
                self.writing.pop(lh.ledger_id, None)

    async def _fill(self, name: str, lh: LedgerHandle, args: dict[str, Any]) -> bool:
        for i in range(ENTRIES_PER_LEDGER):
            if not self._more():
                break
            payload = f"{name} {lh.ledger_id} {i} ".encode() + self.rng.randbytes(64)
            h = self.rec.invoke(
                "add", process=name, node=self.node, ledger=lh.ledger_id, payload=payload, args=args
            )
            ok, entry = await self._timed(h, lambda p=payload: lh.add_entry(p))  # type: ignore[misc]
            if not ok:
                return False
            self.rec.ok(h, entry=entry)
        return True

    async def _close(
        self, name: str, bk: BookKeeper, lh: LedgerHandle, args: dict[str, Any]
    ) -> None:
        h = self.rec.invoke("close", process=name, node=self.node, ledger=lh.ledger_id, args=args)
        ok, _ = await self._timed(h, lh.close)
        if ok:
            # What the metadata says now (the close may have met a recovery's close).
            metadata, _version = await bk.read_metadata(lh.ledger_id)
            self.rec.ok(h, last_entry=metadata.last_entry_id, length=metadata.length)

    async def tailer(self) -> None:
        bk = self.clients[False]
        args = {"workload": "tailer"}
        while self._more():
            await trio.sleep(self.rng.uniform(0.5, 1.5))
            if not self.writing:
                continue
            lid = self.rng.choice(sorted(self.writing))
            h = self.rec.invoke("read_lac", process="tailer", node=self.node, ledger=lid, args=args)
            ok, reader = await self._timed(h, partial(bk.open_ledger, lid))
            if not ok:
                continue
            lac = reader.last_add_confirmed
            self.rec.ok(h, lac=lac)
            if lac < 0:
                continue
            first = max(0, lac - 20)
            h = self.rec.invoke(
                "read",
                process="tailer",
                node=self.node,
                ledger=lid,
                entry=first,
                last=lac,
                args=args,
            )
            ok, entries = await self._timed(h, partial(reader.read_entries, first, lac))
            if ok:
                self.rec.ok_read(h, {e.entry_id: e.payload for e in entries})

    async def recoverer(self) -> None:
        bk = self.clients[False]
        args = {"workload": "recoverer"}
        while self._more():
            await trio.sleep(self.rng.uniform(3, 6))
            if not self.writing or not self._more():
                continue
            lid = self.rng.choice(sorted(self.writing))
            h = self.rec.invoke(
                "recover", process="recoverer", node=self.node, ledger=lid, args=args
            )
            ok, handle = await self._timed(h, partial(bk.open_ledger, lid, recovery=True))
            if ok:
                self.rec.ok(h, last_entry=handle.last_add_confirmed, length=handle.length)

    async def recover_and_read(self, lid: int) -> None:
        """The final phase for one ledger: recover (or open, when closed), read it all."""
        bk = self.clients[False]
        args = {"workload": "final"}
        for _attempt in range(3):
            h = self.rec.invoke("recover", process="final", node=self.node, ledger=lid, args=args)
            ok, handle = await self._timed(h, partial(bk.open_ledger, lid, recovery=True))
            if ok:
                last = handle.last_add_confirmed
                self.rec.ok(h, last_entry=last, length=handle.length)
                break
            await trio.sleep(2)
        else:
            return
        for first in range(0, last + 1, 500):
            chunk_last = min(last, first + 499)
            for _attempt in range(3):
                h = self.rec.invoke(
                    "read", process="final", node=self.node, ledger=lid, entry=first,
                    last=chunk_last, args=args,
                )  # fmt: skip
                ok, entries = await self._timed(
                    h,
                    lambda f=first, c=chunk_last: handle.read_entries(f, c),  # type: ignore[misc]
                )
                if ok:
                    self.rec.ok_read(h, {e.entry_id: e.payload for e in entries})
                    break
                await trio.sleep(2)


@dataclass
class Journeys:
    """The command-line journey, as a user types it, each command a process in the client
    node: ``ledger create``, ``write`` (another process), ``close``, ``recover``, ``read``."""

    rec: Recorder
    node: str
    exec_argv: Callable[[Sequence[str]], list[str]]
    """``argv`` run in the client node."""
    metadata_uri: str
    bookies: dict[str, str]
    """Node name by bookie id."""
    client: BookKeeper
    rng: random.Random
    end: float
    ensemble: int = 2
    quorum: int = 2
    zookeeper: list[str] = field(default_factory=list)
    """The ZooKeeper nodes (none: the metadata is not on the network)."""
    bookiesim: list[str] = field(default_factory=lambda: [sys.executable, "-m", "bookiesim"])
    """The argv prefix of a ``bookiesim`` command (:meth:`.target.Target.bookiesim`)."""

    async def _step(self, step: str, needs: dict[str, Any], *args: str) -> dict[str, Any] | None:
        argv = [*self.bookiesim, "ledger", step, "--metadata", self.metadata_uri]
        argv += ["--json", "--timeout", "5", *args]
        if self.zookeeper:
            needs = {**needs, "zookeeper": self.zookeeper}
        h = self.rec.invoke(
            "journey", process="journey", node=self.node, args={"step": step, **needs}
        )
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        try:
            with trio.fail_after(60):
                done = await trio.run_process(
                    self.exec_argv(argv), capture_stdout=True, capture_stderr=True,
                    check=False, env=env,
                )  # fmt: skip
        except trio.TooSlowError:
            self.rec.unknown(h, "no answer within 60 s")
            return None
        if done.returncode != 0:
            error = (done.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
            self.rec.fail(h, f"exit {done.returncode}: {error[:300]}")
            return None
        try:
            out: dict[str, Any] = json.loads(done.stdout) if done.stdout.strip() else {}
        except ValueError:
            out = {}
        self.rec.ok(h, **{k: v for k, v in out.items() if k in ("ledgerId", "lastEntryId")})
        return out

    async def _needs(self, lid: int) -> dict[str, Any]:
        metadata, _version = await self.client.read_metadata(lid)
        _first, ensemble = metadata.last_ensemble
        members = [self.bookies.get(b, b) for b in ensemble]
        return {"ensemble": members, "write_quorum": metadata.write_quorum_size}

    def _end_finding_needs(self, needs: dict[str, Any], ack_quorum: int) -> dict[str, Any]:
        """A write, close or recover of a ledger another process created finds its end by
        ack-quorum coverage (as upstream does), then replaces dead bookies of its ensemble
        from the others (to add, or to write back what recovery read)."""
        if "ensemble" not in needs:
            return needs
        bookies = {"bookies": sorted(self.bookies.values()), "ensemble_size": self.ensemble}
        return {**needs, "ack_quorum": ack_quorum, **bookies}

    async def run(self) -> None:
        e, q = str(self.ensemble), str(self.quorum)
        while trio.current_time() < self.end:
            create_needs = {
                "bookies": sorted(self.bookies.values()),
                "ensemble_size": self.ensemble,
            }
            out = await self._step("create", create_needs, "-e", e, "-w", q, "-a", q)
            if out is None or "ledgerId" not in out:
                await trio.sleep(1)
                continue
            lid = str(out["ledgerId"])
            for step, extra in (
                ("write", ["--count", "5", "--size", "100"]),
                ("close", []),
                ("recover", []),
                ("read", []),
            ):
                try:
                    needs = await self._needs(int(lid))
                except BKError:
                    needs = {}
                if step in ("write", "close", "recover"):
                    needs = self._end_finding_needs(needs, self.quorum)
                await self._step(step, needs, lid, *extra)
            await trio.sleep(self.rng.uniform(1, 3))
