"""Auto-recovery: the auditor and the replication workers (upstream's ``replication`` package).

When a bookie is lost, the ledgers with a fragment on it are under-replicated. The **auditor**
(one at a time, elected through the metadata store) notices the loss after
``lostBookieRecoveryDelay`` and marks those ledgers in ``ROOT/underreplication/ledgers``; a
periodic check also finds fragments whose replicas are missing entries. **Replication
workers** take a marked ledger under its lock, copy each affected fragment from the surviving
replicas to a replacement bookie, swap the bookie in the ledger's metadata by compare-and-set,
send BP-32's WriteClose (reason ``replication``) to the bookie that received the copy, and
remove the mark. The records in the store are upstream's, so upstream's tools and ours read
the same state (:mod:`bookiesim.metadata.underreplication`).
"""
