"""Tests of ``bookiesim.entrylog``: entry log files byte-compatible with upstream V1."""
