"""Upstream Apache BookKeeper as a chaos target: its bookies in the run's nodes (all of them,
or every other one in a mixed cluster) and its own Java client as a writer workload, from an
installation named by ``--bookkeeper-home`` / ``BOOKKEEPER_HOME`` (``lib/*.jar``, Java 17)."""
