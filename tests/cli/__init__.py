"""Tests of ``bookiesim.cli``: the command line."""
