"""bookiesim: a BookKeeper-compatible bookie with entry log per ledger, for experiments."""

from bookiesim import native

__version__ = "0.1.0"

# Before any hot-path module is imported: the compiled build, or the pure one (bookiesim.native).
native.install()
