"""Experiments run by ``bookiesim sim``: workloads against in-process clusters, measured over
(virtual or real) time. Each experiment is a subpackage or module named in
:data:`bookiesim.sim.sim_command.EXPERIMENT_MODULES`."""
