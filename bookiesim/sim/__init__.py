"""Local cluster, workloads, simulation, benchmarks and the ``bookiesim`` CLI."""
