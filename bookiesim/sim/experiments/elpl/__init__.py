"""``bookiesim sim elpl``: interleaved vs per-ledger entry logs, write-close (BP-32) and GC.

``workload`` draws the workload, ``run`` runs it once against a cluster, ``probes`` measures,
``experiment`` runs the matrix, ``report`` prints and plots, ``command`` is the CLI.
"""
