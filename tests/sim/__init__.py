"""Tests of ``bookiesim.sim``: the command line (shell, bench)."""
