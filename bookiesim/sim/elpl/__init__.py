"""The ELPL experiment behind ``bookiesim sim elpl``: interleaved vs per-ledger entry logs,
write-close (BP-32) and GC.

``workload`` draws the workload, ``run`` runs it once against an in-process cluster, ``probes``
measures, ``experiment`` runs the matrix, ``report`` prints and plots; the command line is
:mod:`bookiesim.cli.elpl_command`.
"""
