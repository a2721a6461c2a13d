"""Tests of bookiesim.metadata: one suite, both backends."""
