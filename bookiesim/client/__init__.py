"""BookKeeper client: digests, ledger handles, quorum writes, recovery, write-close."""
