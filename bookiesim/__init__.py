"""bookiesim: a BookKeeper-compatible bookie with entry log per ledger, for experiments."""

__version__ = "0.1.0"
