"""Power loss: a lazy file system, as Jepsen's LazyFS, that keeps every write not yet fsynced
in memory and forgets it at a crash, optionally tearing the last one; it also answers EIO
to the reads of chosen files (a failing medium).

* :mod:`.model`: the state without I/O (overlays of unsynced writes per file), which the
  hypothesis test drives against a reference.
* :mod:`.driver`: the FUSE handlers over it (pyfuse3, the optional ``faults`` extra).
* ``python -m bookiesim.chaos.lazyfs``: the file system as a process of its own.
* :mod:`.control`: its one-line control protocol over a Unix socket (crash, hold, read
  errors, status).
* :mod:`.mount`: the harness's side: ``lazy_mount``, ``LazyMount.crash`` and
  ``LazyMount.fail_reads``, no pyfuse3.

docs/chaos.md, "Power loss: the lazy file system", says what is lazy and what is not.
"""
