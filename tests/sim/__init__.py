"""Tests of ``bookiesim.sim``: the simulator and the experiments built on it."""
