"""Tests of ``bookiesim.cluster``: bookie processes and local clusters."""
