"""The bookie: config, journal, ledger index, ledger storage, server and handlers."""
